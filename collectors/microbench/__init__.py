"""Microbenchmarks that calibrate the analytical models for a machine (``ddltrace calibrate``).

One module per resource: :mod:`.feedforward` (C_muladd, C_act, C_err), :mod:`.interference` (C_interf(H)),
:mod:`.memory` (r_m, w_m, STREAM bandwidths), :mod:`.disk` (r_d, w_d, IOPS), :mod:`.network` (lat_net, r_net,
the probe server), :mod:`.mpi_pingpong`, :mod:`.gpu`; :mod:`.machine` describes the machine and estimates the
core clock, :mod:`.measure` repeats runs and watches for a busy machine, :mod:`.profile` reads, writes and
compares the hardware profile, :mod:`.suite` runs them all.
"""
