"""Optimizers that run on the parameter servers, named and defaulted as ``torch.optim``'s.

An optimizer object only describes the update: pass it to ``Client.create_variable`` or
``Client.create_table`` (or to ``pstrain.torch.distribute``) and every PS task applies it to the
gradients pushed for that variable or table. Each also takes ``clip_norm`` (> 0: a gradient whose
L2 norm exceeds it is scaled down to it) and ``schedule`` (a learning-rate schedule of this module,
counted in the variable's updates: the global step in sync mode).

Bad values raise ``pstrain.errors.InvalidArgumentError`` naming the argument, here or, for what
only the PS check, when the variable is created.
"""

import math
import numbers

from .errors import InvalidArgumentError

__all__ = ["Optimizer", "SGD", "Adam", "Adagrad", "RMSprop", "Ftrl", "ConstantLR", "StepLR",
           "CosineLR"]


def _number(owner, name, value, low=None, high=None, low_open=False, high_open=False):
    """`value` as a float, checked to be finite and within [low, high] (or open ends)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError("%s: %s must be a number, not %r" % (owner, name, value))
    v = float(value)
    bad = not math.isfinite(v)
    if low is not None:
        bad = bad or v < low or (low_open and v == low)
    if high is not None:
        bad = bad or v > high or (high_open and v == high)
    if bad:
        interval = "%s%s, %s%s" % ("(" if low_open else "[", "-inf" if low is None else low,
                                   "inf" if high is None else high, ")" if high_open else "]")
        raise InvalidArgumentError("%s: %s %r must be in %s" % (owner, name, value, interval))
    return v


def _steps(owner, name, value, positive=True):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
            value < (1 if positive else 0):
        raise InvalidArgumentError("%s: %s must be an integer %s, not %r"
                                   % (owner, name, "> 0" if positive else ">= 0", value))
    return int(value)


class _Schedule:
    def _options(self):
        raise NotImplementedError


class ConstantLR(_Schedule):
    """The optimizer's learning rate at every step (the default)."""

    def _options(self):
        return {"kind": "constant"}

    def __repr__(self):
        return "ConstantLR()"


class StepLR(_Schedule):
    """``lr * gamma ** (step // step_size)``, as ``torch.optim.lr_scheduler.StepLR``."""

    def __init__(self, step_size, gamma=0.1):
        self.step_size = _steps("StepLR", "step_size", step_size)
        self.gamma = _number("StepLR", "gamma", gamma, 0, 1, low_open=True)

    def _options(self):
        return {"kind": "step", "step_size": self.step_size, "decay_rate": self.gamma}

    def __repr__(self):
        return "StepLR(step_size=%d, gamma=%r)" % (self.step_size, self.gamma)


class CosineLR(_Schedule):
    """Linear warm-up from 0 to lr over ``warmup_steps``, then cosine decay to ``min_lr`` at
    ``total_steps`` (and ``min_lr`` after it)."""

    def __init__(self, total_steps, warmup_steps=0, min_lr=0.0):
        self.total_steps = _steps("CosineLR", "total_steps", total_steps)
        self.warmup_steps = _steps("CosineLR", "warmup_steps", warmup_steps, positive=False)
        if self.total_steps <= self.warmup_steps:
            raise InvalidArgumentError("CosineLR: total_steps %d must exceed warmup_steps %d"
                                       % (self.total_steps, self.warmup_steps))
        self.min_lr = _number("CosineLR", "min_lr", min_lr, 0)

    def _options(self):
        return {"kind": "cosine", "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "min_lr": self.min_lr}

    def __repr__(self):
        return "CosineLR(total_steps=%d, warmup_steps=%d, min_lr=%r)" % (
            self.total_steps, self.warmup_steps, self.min_lr)


class Optimizer:
    """Base class: ``lr``, ``clip_norm`` and ``schedule``, common to every optimizer."""

    _name = None

    def __init__(self, lr, clip_norm=0.0, schedule=None):
        owner = type(self).__name__
        self.lr = _number(owner, "lr", lr, 0, low_open=True)
        self.clip_norm = _number(owner, "clip_norm", clip_norm, 0)
        if schedule is not None and not isinstance(schedule, _Schedule):
            raise InvalidArgumentError("%s: schedule must be a pstrain.optim schedule "
                                       "(ConstantLR, StepLR, CosineLR), not %r" % (owner, schedule))
        self.schedule = schedule

    def _fields(self):
        """The optimizer's own fields of the C++ OptimizerOptions."""
        return {}

    def _options(self):
        """The fields of the C++ OptimizerOptions (used by the extension module)."""
        options = {"name": self._name, "learning_rate": self.lr, "clip_norm": self.clip_norm}
        options.update(self._fields())
        if self.schedule is not None:
            options["schedule"] = self.schedule._options()
        return options

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)


class SGD(Optimizer):
    """Stochastic gradient descent, with (Nesterov) momentum when ``momentum`` > 0."""

    _name = "sgd"

    def __init__(self, lr, momentum=0.0, nesterov=False, clip_norm=0.0, schedule=None):
        super().__init__(lr, clip_norm, schedule)
        self.momentum = _number("SGD", "momentum", momentum, 0, 1, high_open=True)
        if nesterov and self.momentum == 0:
            raise InvalidArgumentError("SGD: nesterov needs a momentum > 0")
        self.nesterov = bool(nesterov)

    def _options(self):
        options = super()._options()
        if self.momentum > 0:
            options.update(name="momentum", momentum=self.momentum, nesterov=self.nesterov)
        return options


class Adam(Optimizer):
    """Adam (Kingma and Ba); on a table, lazy Adam as ``torch.optim.SparseAdam``."""

    _name = "adam"

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, clip_norm=0.0, schedule=None):
        super().__init__(lr, clip_norm, schedule)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise InvalidArgumentError("Adam: betas must be a pair, not %r" % (betas,))
        self.betas = (_number("Adam", "betas[0]", betas[0], 0, 1, high_open=True),
                      _number("Adam", "betas[1]", betas[1], 0, 1, high_open=True))
        self.eps = _number("Adam", "eps", eps, 0)

    def _fields(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "epsilon": self.eps}


class Adagrad(Optimizer):
    _name = "adagrad"

    def __init__(self, lr=1e-2, initial_accumulator_value=0.0, eps=1e-10, clip_norm=0.0,
                 schedule=None):
        super().__init__(lr, clip_norm, schedule)
        self.initial_accumulator_value = _number("Adagrad", "initial_accumulator_value",
                                                 initial_accumulator_value, 0)
        self.eps = _number("Adagrad", "eps", eps, 0)

    def _fields(self):
        return {"initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.eps}


class RMSprop(Optimizer):
    _name = "rmsprop"

    def __init__(self, lr=1e-2, alpha=0.99, eps=1e-8, momentum=0.0, clip_norm=0.0,
                 schedule=None):
        super().__init__(lr, clip_norm, schedule)
        self.alpha = _number("RMSprop", "alpha", alpha, 0, 1, high_open=True)
        self.eps = _number("RMSprop", "eps", eps, 0)
        self.momentum = _number("RMSprop", "momentum", momentum, 0, 1, high_open=True)

    def _fields(self):
        return {"rho": self.alpha, "epsilon": self.eps, "momentum": self.momentum}


class Ftrl(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013), as ``tf.keras.optimizers.Ftrl``."""

    _name = "ftrl"

    def __init__(self, lr, lr_power=-0.5, l1=0.0, l2=0.0, initial_accumulator_value=0.1,
                 clip_norm=0.0, schedule=None):
        super().__init__(lr, clip_norm, schedule)
        self.lr_power = _number("Ftrl", "lr_power", lr_power, None, 0)
        self.l1 = _number("Ftrl", "l1", l1, 0)
        self.l2 = _number("Ftrl", "l2", l2, 0)
        self.initial_accumulator_value = _number("Ftrl", "initial_accumulator_value",
                                                 initial_accumulator_value, 0, low_open=True)

    def _fields(self):
        return {"learning_rate_power": self.lr_power, "l1": self.l1, "l2": self.l2,
                "initial_accumulator_value": self.initial_accumulator_value}
