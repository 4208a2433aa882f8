"""Things a collector or a test makes for the length of a ``with`` block (a simulated cluster, CPU quota cgroups,
a Dask cluster) and removes after it, whatever happened in it."""

from __future__ import annotations


class Scoped:
    """Made by :meth:`_make` when the ``with`` block starts and removed by :meth:`close` when it ends; a failure
    part way through :meth:`_make` closes what was made before the error goes on, so :meth:`close` must remove
    whatever part exists and be safe to call twice."""

    def _make(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()
