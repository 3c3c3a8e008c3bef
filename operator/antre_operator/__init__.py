"""antre_operator: the JobQueue operator (kopf) that runs and autoscales antre workers.

Layers, from pure to I/O (tests keep the pure ones free of kopf, Kubernetes and Redis):

* ``settings`` (constants, operator settings), ``spec`` (parse + validate a JobQueue),
  ``rendering`` (spec -> child manifests), ``scaling`` (the replica decision),
  ``status`` (conditions) -- pure;
* ``backlog`` (reads queue depth through ``antre``), ``kube`` (the only Kubernetes API client),
  ``metrics`` (Prometheus) -- I/O, one concern each;
* ``reconciling`` (one JobQueue's read -> decide -> apply loop), ``handlers`` (kopf wiring),
  ``__main__`` (the ``antre-operator`` command).
"""
