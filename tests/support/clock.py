"""A clock that tests move by hand, for anything that takes a ``monotonic`` or ``wall`` callable."""


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now
