"""Each capability's scenario hooks: what ``governor demo`` and the reliability runs do for it, one module (or
package) per capability, named by its registry entry's ``demo`` and loaded through ``governor_cli.demo.hooks``.

What a hook module may define (all optional; the demo and the scenarios call what is there, in registry order):

- ``SOAK``: its policy section in the reliability runs' policy (``testing.scenarios.soak_policy``).
- ``CASES``: ``(weight, builder)`` pairs, each ``builder(scenarios, index) -> Case`` one independent event for its
  function about a resource of its own (``testing.scenarios.Scenarios``).
- ``incidents(sim, key_id)``: the demo's scripted events for it, by minute of the simulated day.
- ``tick(sim)``: what its schedule does at every sweep of the simulated day; ``close(sim)``: at the day's end.
- ``target_ports(target, runtime)``: organisation mode, its adapters in a member account (its handler's fan-out
  target builder), when the demo plays a sweep there in process.
- roles another capability's scenario asks for by name (``hooks.provided``): ``warning_finding`` (the finding that
  warns an owner, with buttons), ``critical_finding`` (a critical security finding).
"""
