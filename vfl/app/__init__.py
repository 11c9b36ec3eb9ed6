"""The application: the ``vflink`` command, the party runners and the comparison.

The layer on top of the packages (``linkage`` <- the ``vfl`` toolkit and vertical models <-
``transfer``, ``horizontal`` <- this): nothing below imports it, and it imports no family by
name -- it finds each family's jobs and comparison rows through the registries of
:mod:`vfl.registry`, which the families fill from the entry points of the
``vflink.families`` group (:mod:`vfl.app.families`).

* :mod:`vfl.app.cli` -- the ``vflink`` command;
* :mod:`vfl.app.party` -- one party's side of a vertical job (``vflink party``), from
  :mod:`vfl.app.plan` (every check without a peer) through :mod:`vfl.app.drive` (the stages,
  failing fast, the outputs written at the end); :mod:`vfl.app.transfer` the transfer job's
  stages; :mod:`vfl.app.predict` scoring new rows with saved parts (``--predict``);
  :mod:`vfl.app.scheduler` a party's own Dask cluster;
* :mod:`vfl.app.compare` -- every partition scheme side by side (``vflink compare``).
"""
