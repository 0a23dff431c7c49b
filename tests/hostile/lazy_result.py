"""Attack: return a lazy number whose work happens when the checker looks at it."""


class Lazy(float):
    def __new__(cls, n):
        obj = super().__new__(cls, 0.0)
        obj.n = n
        return obj

    def __eq__(self, other):
        return float(sum(i * 0.001 for i in range(self.n))) == other

    __hash__ = float.__hash__


def total(n, workers=1):
    return Lazy(n)
