"""Initializers: how the chief fills a new variable (or a table its new rows).

The values are drawn once, on the chief, from ``seed``: every worker that creates the same
variable gets the same values, whatever the number of workers and PS. Names and defaults follow
``torch.nn.init`` (``uniform_``, ``normal_``, ``trunc_normal_``, ``xavier_uniform_``).
"""

import math
import numbers

from .errors import InvalidArgumentError

__all__ = ["Initializer", "Zeros", "Constant", "Uniform", "Normal", "TruncatedNormal",
           "GlorotUniform"]


def _real(owner, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value):
        raise InvalidArgumentError("%s: %s must be a finite number, not %r" % (owner, name, value))
    return float(value)


def _seed(owner, seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or \
            not 0 <= seed < 2 ** 64:
        raise InvalidArgumentError("%s: seed must be an integer in [0, 2^64), not %r"
                                   % (owner, seed))
    return int(seed)


class Initializer:
    """Base class; ``_options()`` gives the fields of the C++ InitializerOptions."""

    _kind = None

    def _fields(self):
        return {}

    def _options(self):
        options = {"kind": self._kind}
        options.update(self._fields())
        return options

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__,
                           ", ".join("%s=%r" % kv for kv in vars(self).items()))


class Zeros(Initializer):
    """Every value 0 (the default)."""
    _kind = "zeros"


class Constant(Initializer):
    """Every value ``value``."""

    _kind = "constant"

    def __init__(self, value):
        self.value = _real("Constant", "value", value)

    def _fields(self):
        return {"value": self.value}


class Uniform(Initializer):
    """Uniform in [low, high)."""

    _kind = "uniform"

    def __init__(self, low=0.0, high=1.0, seed=0):
        self.low = _real("Uniform", "low", low)
        self.high = _real("Uniform", "high", high)
        if self.high < self.low:
            raise InvalidArgumentError("Uniform: high %r is below low %r" % (high, low))
        self.seed = _seed("Uniform", seed)

    def _fields(self):
        return {"low": self.low, "high": self.high, "seed": self.seed}


class Normal(Initializer):
    """Normal with mean ``mean`` and standard deviation ``std``."""

    _kind = "normal"

    def __init__(self, mean=0.0, std=1.0, seed=0):
        self.mean = _real(type(self).__name__, "mean", mean)
        self.std = _real(type(self).__name__, "std", std)
        if self.std < 0:
            raise InvalidArgumentError("%s: std %r must be >= 0" % (type(self).__name__, std))
        self.seed = _seed(type(self).__name__, seed)

    def _fields(self):
        return {"mean": self.mean, "stddev": self.std, "seed": self.seed}


class TruncatedNormal(Normal):
    """Normal, values beyond 2 standard deviations from the mean drawn again."""
    _kind = "truncated_normal"


class GlorotUniform(Initializer):
    """Glorot (Xavier) uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) from the shape. Not
    for tables (a row has no fan-in)."""

    _kind = "glorot_uniform"

    def __init__(self, seed=0):
        self.seed = _seed("GlorotUniform", seed)

    def _fields(self):
        return {"seed": self.seed}
