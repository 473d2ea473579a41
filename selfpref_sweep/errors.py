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
        problem = " ".join(str(problem).split())  # SQLite's check reports span lines; a message is one
        self.path, self.problem = str(path), problem if len(problem) <= 300 else problem[:297] + "..."
        super().__init__(
            f"The call store {path} is damaged ({self.problem}). Nothing was computed from it. Run `python -m "
            f"selfpref_sweep.store salvage {path}` to keep every call that can still be read (it copies them into a "
            f"fresh store at that path, keeps the damaged file beside it as *.damaged and reports what was lost), "
            f"then re-run the same command: only the lost calls are made again. (`python -m selfpref_sweep.store "
            f"check {path}` shows the damage; deleting the file starts an empty cache.)")
