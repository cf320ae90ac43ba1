"""Each capability's scenario hooks: what ``governor demo`` and the reliability runs do for it, one module (or
package) per capability, named by its registry entry's ``demo`` and loaded through ``governor_cli.demo.hooks``.

What a hook module may define (all optional; the demo and the scenarios call what is there, in registry order):

The reliability runs (``testing.scenarios``, ``testing.deployment``):

- ``SOAK``: its policy section in the reliability runs' policy (``testing.scenarios.soak_policy``).
- ``CASES``: ``(weight, builder)`` pairs, each ``builder(scenarios, index) -> Case`` one independent event for its
  function about a resource of its own (``testing.scenarios.Scenarios``).
- ``DEPLOYED_ENVIRONMENT``: what the stack adds to its function's environment beyond its policy sections.
- ``deployed_secrets(policy)``: the secrets of its own the deployment seeds, ``{name: value}``.
- ``record_states(region)``: the records its cases leave in an external service, ``{id: state}``, read after a run
  (``testing.hub_state`` judges each case's ``Case.record`` against them).

The demo (``demo.run``; ``sim`` is its ``Simulation``, at the current (account, region) target):

- ``policy_sections(policy)``: its sections of the policy the demo runs (``demo.run.demo_policy``), ``{section:
  model}`` made from the chosen policy's (``--enforce`` applied), keeping what that policy sets.
- ``CLOUDTRAIL_CALLS``: the API calls its CloudTrail rule receives (``Simulation.api_call`` delivers them).
- ``connect(sim)``: operator set-up before the day (secrets); ``start(sim)``: once, before the fleet is launched;
  ``set_up(sim)``: in each target, after the fleet is launched.
- ``incidents(sim)``: its scripted events, by minute of the simulated day.
- ``metrics(sim, since, until)``: samples of its own resources for a tick; ``tick(sim)``: what its schedule does at
  every sweep; ``state_changes(sim)``: state changes its own resources went through; ``state_changed(sim, change)``:
  an EC2 state-change event reaching its rule; ``respond(sim)``: after each tick's findings are delivered.
- ``close(sim)``: at the day's end, in each target; ``collect(sim)``: the read-back; ``stop(sim)``: always, after
  the day; ``finish(sim)``: once the day's trail and ledger are written (the report over them).
- ``target_ports(target, runtime)``: organisation mode, its adapters in a member account (its handler's fan-out
  target builder), when the demo plays a sweep there in process.

Roles another capability's scenario or the summary asks for (``hooks.provided``, exactly one provider each):
``warning_finding`` and ``critical_finding`` (findings the notifier delivers), ``reconcile``, ``stopped_by_governor``,
``click_facts``, ``eks_facts``, ``report_facts``, ``digest_held``, ``digests_posted`` and ``account_figures`` (the
organisation demo's per-account attribution).
"""
