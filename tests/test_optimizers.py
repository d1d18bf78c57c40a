"""Optimizers and learning-rate schedules against NumPy float32 replays of
Keras 3's formulas (keras/src/optimizers/{adam,rmsprop,sgd,base_optimizer}.py,
schedules/learning_rate_schedule.py), several steps, eager and compiled."""
import math

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from pyresnet.optimizers import schedules

from keras_replays import keras_sgd

f32 = np.float32


# ---- NumPy replays of Keras 3, op by op in float32 ------------------------------------------

def keras_adam(w, grads, lrs, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, wd=None):
    w, m, v, vh = w.copy(), np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for t, (g, lr) in enumerate(zip(grads, lrs)):
        lr = f32(lr)
        if wd:
            w = w - w * f32(wd) * lr
        step = f32(t + 1)
        b1p, b2p = np.power(f32(beta_1), step), np.power(f32(beta_2), step)
        alpha = lr * np.sqrt(f32(1) - b2p) / (f32(1) - b1p)
        m = m + (g - m) * f32(1 - beta_1)
        v = v + (np.square(g) - v) * f32(1 - beta_2)
        vv = v
        if amsgrad:
            vh = np.maximum(vh, v)
            vv = vh
        w = w - (m * alpha) / (np.sqrt(vv) + f32(epsilon))
    return w


def keras_rmsprop(w, grads, lrs, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, wd=None):
    w, vel, mom, avg = w.copy(), np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for g, lr in zip(grads, lrs):
        lr = f32(lr)
        if wd:
            w = w - w * f32(wd) * lr
        vel = f32(rho) * vel + f32(1 - rho) * np.square(g)
        if centered:
            avg = f32(rho) * avg + f32(1 - rho) * g
            denominator = vel - np.square(avg) + f32(epsilon)
        else:
            denominator = vel + f32(epsilon)
        increment = (lr * g) / np.sqrt(denominator)
        if momentum > 0:
            mom = f32(momentum) * mom + increment
            w = w - mom
        else:
            w = w - increment
    return w


def keras_cosine_decay(step, initial, decay_steps, alpha=0.0, warmup_target=None,
                       warmup_steps=0, linear=False):
    """CosineDecay.__call__ in float32 (linear: the one-cycle's annealing)."""
    initial, decay_steps, s = f32(initial), f32(decay_steps), f32(step)

    def decay(s, frm):
        frac = s / decay_steps
        c = f32(1) - frac if linear else f32(0.5) * (f32(1) + np.cos(f32(math.pi) * frac))
        return frm * (f32(1 - alpha) * c + f32(alpha))
    if warmup_target is None:
        return decay(np.minimum(s, decay_steps), initial)
    target, ws = f32(warmup_target), f32(warmup_steps)
    s = np.minimum(s, decay_steps + ws)
    if s < ws:
        return (target - initial) * (s / ws) + initial
    return decay(s - ws, target)


def keras_exponential_decay(step, initial, decay_steps, rate, staircase=False):
    p = f32(step) / f32(decay_steps)
    if staircase:
        p = np.floor(p)
    return f32(initial) * np.power(f32(rate), p)


def keras_piecewise(step, boundaries, values):
    out = f32(0)
    out += f32(step <= boundaries[0]) * f32(values[0])
    out += f32(step > boundaries[-1]) * f32(values[-1])
    for low, high, v in zip(boundaries[:-1], boundaries[1:], values[1:-1]):
        out += f32(low < step <= high) * f32(v)
    return out


# ---- the optimizers over several steps, eager and compiled --------------------------------

def run(optimizer, w0, grads, lrs, compiled, set_lr=True):
    """Apply ``grads`` one per step (setting a float rate to ``lrs`` first)."""
    w = pr.Variable(w0.copy(), name="kernel")

    def step(g):
        optimizer.apply_gradients([(g, w)])

    fn = pr.compile(step) if compiled else step
    for g, lr in zip(grads, lrs):
        if set_lr:
            optimizer.learning_rate = lr
        fn(g)
    if compiled:
        assert fn.tracing_count == 1  # a new rate every step, one trace
    assert int(optimizer.iterations) == len(grads)
    return w.numpy()


def _problem(rng, shape=(3, 5), steps=5):
    w0 = rng.standard_normal(shape).astype(f32)
    grads = [rng.standard_normal(shape).astype(f32) for _ in range(steps)]
    return w0, grads, [0.01, 0.02, 0.005, 0.01, 0.003][:steps]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kind,kwargs", [
    ("adam", {}), ("adam", {"amsgrad": True, "beta_1": 0.8}), ("adam", {"weight_decay": 0.1}),
    ("adamw", {}), ("adamw", {"weight_decay": 0.05, "amsgrad": True}),
    ("rmsprop", {}), ("rmsprop", {"momentum": 0.9}), ("rmsprop", {"centered": True}),
    ("rmsprop", {"momentum": 0.5, "centered": True, "weight_decay": 0.01, "rho": 0.8}),
    ("sgd", {"momentum": 0.9, "nesterov": True, "weight_decay": 5e-3}),
])
def test_optimizer_matches_keras_replay(rng, kind, kwargs, compiled):
    w0, grads, lrs = _problem(rng)
    opt = pr.optimizers.get(kind).__class__(**kwargs)
    got = run(opt, w0, grads, lrs, compiled)
    if kind in ("adam", "adamw"):
        wd = kwargs.get("weight_decay", 0.004 if kind == "adamw" else None)
        keras_kwargs = {k: v for k, v in kwargs.items() if k != "weight_decay"}
        want = keras_adam(w0, grads, lrs, wd=wd, **keras_kwargs)
    elif kind == "rmsprop":
        want = keras_rmsprop(w0, grads, lrs, wd=kwargs.get("weight_decay"),
                             **{k: v for k, v in kwargs.items() if k != "weight_decay"})
    else:
        want = keras_sgd(w0, grads, lrs, 0.9, True, 5e-3)[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert not np.allclose(want, w0, rtol=1e-3)
    names = {"adam": ["momentum", "velocity"], "rmsprop": ["velocity"], "sgd": ["velocity"]}
    slots = [n for n, _, _ in opt.slot_variables()]
    assert slots[:len(names.get(kind, names["adam"]))] == names.get(kind, names["adam"])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_clipping_and_weight_decay_exclusion(rng, compiled):
    """clipnorm per variable, global_clipnorm over all, clipvalue per element
    (Keras's _clip_gradients), and exclude_from_weight_decay by name."""
    k0, b0 = rng.standard_normal((4, 3)).astype(f32), rng.standard_normal(3).astype(f32)
    gk = [rng.standard_normal((4, 3)).astype(f32) * 3 for _ in range(3)]
    gb = [rng.standard_normal(3).astype(f32) * 0.1 for _ in range(3)]
    for clip in [{"clipnorm": 1.0}, {"global_clipnorm": 2.0}, {"clipvalue": 0.5}]:
        opt = pr.optimizers.SGD(0.1, momentum=0.9, weight_decay=0.01, **clip)
        opt.exclude_from_weight_decay(var_names=["bias"])
        kernel, bias = pr.Variable(k0, name="kernel"), pr.Variable(b0, name="bias")

        def step(a, b):
            opt.apply([a, b], [kernel, bias])

        fn = pr.compile(step) if compiled else step
        for a, b in zip(gk, gb):
            fn(a, b)
        if "clipnorm" in clip:
            def clipped(gs):
                return [g * f32(1.0) / np.maximum(np.sqrt(np.sum(np.square(g))), f32(1.0))
                        for g in gs]
        elif "global_clipnorm" in clip:
            def clipped(gs):
                norm = np.sqrt(sum(np.sum(np.square(g)) for g in gs))
                return [g * (f32(2.0) * np.minimum(f32(1) / norm, f32(0.5))) for g in gs]
        else:
            def clipped(gs):
                return [np.clip(g, f32(-0.5), f32(0.5)) for g in gs]
        cg = [clipped([a, b]) for a, b in zip(gk, gb)]
        want_k = keras_sgd(k0, [c[0] for c in cg], [0.1] * 3, 0.9, False, 0.01)[0]
        want_b = keras_sgd(b0, [c[1] for c in cg], [0.1] * 3, 0.9, False, None)[0]  # excluded
        np.testing.assert_allclose(kernel.numpy(), want_k, rtol=1e-5, atol=1e-6, err_msg=clip)
        np.testing.assert_allclose(bias.numpy(), want_b, rtol=1e-5, atol=1e-6, err_msg=clip)
    with pytest.raises(ValueError, match="before the optimizer is built"):
        opt.exclude_from_weight_decay(var_names=["gamma"])


def test_apply_after_build_and_names():
    """Keras 3's ``optimizer.apply(grads)`` after ``build(vars)``; string
    names; bad arguments raise and change nothing."""
    w = pr.Variable(np.ones(3, f32), name="w")
    opt = pr.optimizers.get("ADAM")
    assert type(opt) is pr.optimizers.Adam and opt.learning_rate.numpy() == f32(0.001)
    opt.build([w])
    assert [n for n, _, _ in opt.slot_variables()] == ["momentum", "velocity"]
    assert opt.apply_gradients([(np.ones(3, f32), w)]) is opt.iterations
    opt.apply([np.ones(3, f32)])
    np.testing.assert_allclose(w.numpy(), keras_adam(np.ones(3, f32), [np.ones(3, f32)] * 2,
                                                     [0.001] * 2), rtol=1e-6)
    for name, cls in [("sgd", "SGD"), ("adamw", "AdamW"), ("rmsprop", "RMSprop")]:
        assert type(pr.optimizers.get(name)).__name__ == cls
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'"):
        pr.optimizers.get("adagrad")
    with pytest.raises(ValueError, match="2 gradients for 1 variables"):
        opt.apply([np.ones(3, f32)] * 2)
    with pytest.raises(ValueError, match="must be built"):
        pr.optimizers.RMSprop().apply([np.ones(3, f32)])
    with pytest.raises(ValueError, match="weight_decay` must be a float, got None"):
        pr.optimizers.AdamW(weight_decay=None)
    with pytest.raises(ValueError, match="only one of `clipnorm`"):
        pr.optimizers.Adam(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(NotImplementedError, match="loss_scale_factor"):
        pr.optimizers.Adam(loss_scale_factor=2.0)
    with pytest.raises(ValueError, match="beta_1"):
        pr.optimizers.Adam(beta_1=1.0)
    with pytest.raises(TypeError, match="not settable"):
        pr.optimizers.SGD(schedules.ExponentialDecay(0.1, 10, 0.5)).learning_rate = 0.1


# ---- schedules ---------------------------------------------------------------------------

SCHEDULES = [
    (lambda: schedules.CosineDecay(0.1, 50),
     lambda s: keras_cosine_decay(s, 0.1, 50)),
    (lambda: schedules.CosineDecay(0.1, 40, alpha=0.1),
     lambda s: keras_cosine_decay(s, 0.1, 40, alpha=0.1)),
    (lambda: schedules.CosineDecay(0.0, 45, warmup_target=0.2, warmup_steps=5),
     lambda s: keras_cosine_decay(s, 0.0, 45, warmup_target=0.2, warmup_steps=5)),
    (lambda: schedules.OneCycle(0.4, 50, warmup_steps=10, initial_learning_rate=0.04),
     lambda s: keras_cosine_decay(s, 0.04, 40, warmup_target=0.4, warmup_steps=10,
                                  linear=True)),
    (lambda: schedules.OneCycle(0.4, 50, warmup_steps=10, annealing="cosine",
                                final_learning_rate=0.004),
     lambda s: keras_cosine_decay(s, 0.0, 40, alpha=0.004 / 0.4, warmup_target=0.4,
                                  warmup_steps=10)),
    (lambda: schedules.ExponentialDecay(0.1, 7, 0.5),
     lambda s: keras_exponential_decay(s, 0.1, 7, 0.5)),
    (lambda: schedules.ExponentialDecay(0.1, 7, 0.5, staircase=True),
     lambda s: keras_exponential_decay(s, 0.1, 7, 0.5, True)),
    (lambda: schedules.PiecewiseConstantDecay([10, 30], [0.1, 0.01, 0.001]),
     lambda s: keras_piecewise(s, [10, 30], [0.1, 0.01, 0.001])),
]


@pytest.mark.parametrize("k", range(len(SCHEDULES)))
def test_schedule_matches_keras_eager_and_compiled(k):
    """Every step 0..59 (past the end) eagerly from ints, and compiled from an
    int64 counter Variable: one trace, the rate computed in the graph."""
    make, ref = SCHEDULES[k]
    schedule = make()
    want = np.array([ref(s) for s in range(60)], f32)
    eager = np.array([float(schedule(np.int64(s))) for s in range(60)], f32)
    np.testing.assert_allclose(eager, want, rtol=1e-6, atol=1e-9)
    counter = pr.Variable(np.int64(0), trainable=False)

    @pr.compile
    def rate():
        lr = schedule(counter)
        counter.assign_add(np.int64(1))
        return lr

    compiled = np.array([float(rate()) for _ in range(60)], f32)
    np.testing.assert_array_equal(compiled, eager)
    assert rate.tracing_count == 1
    again = schedules.deserialize(schedules.serialize(schedule))
    assert type(again) is type(schedule) and again.get_config() == schedule.get_config()


def test_schedule_errors():
    for make, match in [(lambda: schedules.CosineDecay(0.1, 0), "decay_steps` must be > 0"),
                        (lambda: schedules.ExponentialDecay(0.1, -1, 0.5), "decay_steps"),
                        (lambda: schedules.PiecewiseConstantDecay([1, 2], [0.1]),
                         "should be 1 less"),
                        (lambda: schedules.PiecewiseConstantDecay([3, 2], [1, 2, 3]),
                         "must not decrease"),
                        (lambda: schedules.OneCycle(0.1, 10, warmup_steps=10), "warmup_steps"),
                        (lambda: schedules.OneCycle(0.1, 10, annealing="step"), "annealing")]:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(ValueError, match="the step must hold one number"):
        schedules.CosineDecay(0.1, 10)(np.zeros(2, np.int64))


# ---- under fit ------------------------------------------------------------------------------

def _model(seed):
    pr.utils.set_random_seed(seed)
    return pr.Sequential([layers.Input((6,)), layers.Dense(8, activation="relu"),
                          layers.Dense(3)])


@pytest.mark.parametrize("make_opt", [
    lambda: pr.optimizers.SGD(schedules.CosineDecay(0.0, 10, warmup_target=0.5,
                                                    warmup_steps=3), momentum=0.9),
    lambda: pr.optimizers.AdamW(schedules.OneCycle(0.05, 13, warmup_steps=4), 1e-2),
], ids=["sgd-cosine", "adamw-onecycle"])
def test_fit_with_a_schedule_never_retraces(rng, make_opt):
    """The rate changes every step inside the compiled step (one trace); the
    rate seen per batch is the schedule's, and compiled fit equals eager fit."""
    x = rng.standard_normal((40, 6)).astype(f32)
    y = rng.integers(0, 3, 40)
    runs = []
    for eager in (False, True):
        model = _model(3)
        model.compile(make_opt(), pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=eager)
        seen = []
        rec = pr.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: seen.append(
            float(model.optimizer.learning_rate)))
        model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=[rec])
        runs.append((model.get_weights(), seen))
        if not eager:
            assert model.train_function.tracing_count == 1
            assert int(model.optimizer.iterations) == 15
    schedule = make_opt()._learning_rate
    want = [float(schedule(np.int64(s))) for s in range(15)]
    assert runs[0][1] == runs[1][1] == want and len(set(want)) > 10
    for a, b in zip(runs[0][0], runs[1][0]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_save_and_load_adam_with_a_schedule(tmp_path, rng):
    """The schedule is saved in the compile config, the slots by weight path;
    training after loading continues exactly as without the save."""
    x = rng.standard_normal((32, 6)).astype(f32)
    y = rng.integers(0, 3, 32)
    model = _model(5)
    model.compile(pr.optimizers.Adam(schedules.ExponentialDecay(0.01, 4, 0.5), amsgrad=True,
                                     global_clipnorm=1.0),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = pr.models.load_model(tmp_path / "m.keras")
    opt = loaded.optimizer
    assert type(opt) is pr.optimizers.Adam and opt.amsgrad and opt.global_clipnorm == 1.0
    assert isinstance(opt._learning_rate, schedules.ExponentialDecay)
    assert int(opt.iterations) == 4 and float(opt.learning_rate) == pytest.approx(0.005)
    assert sorted({n for n, _, _ in opt.slot_variables()}) == ["momentum", "velocity",
                                                                "velocity_hat"]
    for m in (model, loaded):
        m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", [lambda: pr.optimizers.SGD(0.01, momentum=0.9),
                                  lambda: pr.optimizers.Adam(0.01),
                                  lambda: pr.optimizers.RMSprop(0.01, momentum=0.9,
                                                                centered=True)])
def test_slots_below_the_normal_range_become_zero(make):
    """A slot that decays where the gradient is zero (a dead unit's weights)
    reaches float32's subnormal range, where each product costs a microcode
    assist; the update ops keep such slots at zero, as TensorFlow's CPU
    kernels do (flush-to-zero): no slot is ever subnormal, and after enough
    zero-gradient steps the first (the momentum, Adam's m) is exactly 0;
    normal slots follow the formulas (the Keras replay tests)."""
    tiny = np.finfo(np.float32).tiny
    w = pr.Variable(np.ones(4, np.float32))
    opt = make()
    opt.apply_gradients([(pr.Tensor(np.full(4, 1e-3, np.float32)), w)])
    zero = pr.Tensor(np.zeros(4, np.float32))
    seen_subnormal = False
    for _ in range(3000):  # 0.9 ** 3000 * 1e-3 is far below tiny
        opt.apply_gradients([(zero, w)])
        for s in opt.variables:
            a = np.asarray(s.numpy(), np.float32).ravel()
            if a.size == 4:
                seen_subnormal |= bool(np.any((a != 0) & (np.abs(a) < tiny)))
    assert not seen_subnormal
    slots = [np.asarray(s.numpy()).ravel() for s in opt.variables if np.size(s.numpy()) == 4]
    assert slots and all(np.all(a == 0) for a in slots[:1])
    assert np.all(np.isfinite(w.numpy()))
