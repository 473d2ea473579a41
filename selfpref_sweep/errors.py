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
