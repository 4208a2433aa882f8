"""The papers' analytical models, as plain functions of their parameters (one module per paper).

- :mod:`ddltrace.models.hashemi`: Hashemi et al. (002), per-worker ASGD model with one parameter server.
- :mod:`ddltrace.models.yan`: Yan et al. (000), layer-wise model and the scalability optimiser.
- :mod:`ddltrace.models.chang`: Chang et al. (001), Lemma 3.1 / 3.2 and the mini-batch integer program.
- :mod:`ddltrace.models.ralp`: Park et al. (003), parameter skewness, split point and traffic.
- :mod:`ddltrace.models.rudra`: Gupta et al. (004), staleness and learning-rate rules.
- :mod:`ddltrace.models.dnn`: the DNN description format the models read.
- :mod:`ddltrace.models.quantities`: reading "10Gbit/s", "12GiB", "500ms" and hardware profiles.

Every formula is written out in the shared MODELS.md; units are seconds, bytes and counts throughout.
"""
