"""Errors that reach the user as one clear paragraph instead of a traceback."""


class SelfprefError(Exception):
    """A problem the user can fix (configuration, input data, missing weights)."""


class ConfigError(SelfprefError):
    pass


class DataError(SelfprefError):
    pass


class ModelUnavailableError(SelfprefError):
    """Weights, packages or a server that a model needs are not available here."""


class StorageError(SelfprefError):
    """Results could not be written (disk full, permissions)."""


class StoreDamagedError(StorageError):
    """The call store is not a healthy SQLite file; the message names it and the command that repairs it."""

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(
            f"The call store {path} is damaged ({problem}). Nothing was computed from it. To keep every call "
            f"that can still be read, run\n    python -m selfpref_sweep.store salvage {path}\nwhich copies the "
            f"readable calls into a fresh store at that path, keeps the damaged file beside it as *.damaged, and "
            f"reports what was lost; then re-run the same command: only the lost calls are made again. "
            f"(`python -m selfpref_sweep.store check {path}` shows the damage; deleting the file starts an empty "
            f"cache.)")
