"""GPU Fleet Governor's operator tooling: the ``governor`` command, the demo, the fleet simulator and test support.

Everything here runs on a workstation or in CI, never in a Lambda: it is a separate package so the deployed asset
(``lambdas/governor``) holds only the runtime. It imports the runtime and ``infra``; the runtime imports neither.
"""
