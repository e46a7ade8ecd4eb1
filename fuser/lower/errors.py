"""The error every lowering raises for what it cannot generate code for."""


class NotLowerable(NotImplementedError):
    """The segment uses something this lowering does not generate code for yet."""
