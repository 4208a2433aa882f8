"""Real training jobs that ddltrace ships to be measured: they show the papers' pathologies on one machine.

- :mod:`ddltrace.collectors.workloads.ps_sgd`: the parameter-server SGD job of Hashemi et al. (paper 002,
  section 4.2) with Rudra's synchronisation protocols (paper 004); run it with ``ddltrace workload ps-sgd``.
"""
