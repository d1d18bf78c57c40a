"""airbench94's pieces against NumPy references: the optimizers' EMA
(Keras 3) and Lookahead, per-variable learning-rate multipliers, the Dirac
and patch-whitening initializers, test-time augmentation, the network and
the recipe's command line (Jordan 2024, arXiv 2404.00498)."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet.applications import airbench
from pyresnet.tensor import Variable


def _run(step, compiled, grads):
    f = pr.compile(step) if compiled else step
    for g in grads:
        f(*g)


@pytest.mark.parametrize("compiled", [False, True])
def test_ema_matches_keras_semantics(compiled):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    grads = [(rng.standard_normal((3, 4)).astype(np.float32),) for _ in range(7)]
    v = Variable(w0.copy())
    opt = pr.optimizers.SGD(0.1, momentum=0.9, use_ema=True, ema_momentum=0.8,
                            ema_overwrite_frequency=3)
    _run(lambda g: opt.apply_gradients([(g, v)]), compiled, grads)
    # Keras 3 (base_optimizer.apply): the update, then the average (momentum 0 at
    # iterations 0), then the overwrite when (iterations + 1) % frequency == 0
    w, vel, avg = w0.astype(np.float64), np.zeros((3, 4)), np.zeros((3, 4))
    for t, (g,) in enumerate(grads):
        vel = 0.9 * vel - 0.1 * g
        w = w + vel
        m = 0.0 if t == 0 else 0.8
        avg = m * avg + (1 - m) * w
        if (t + 1) % 3 == 0:
            w = avg.copy()
    np.testing.assert_allclose(np.array(v), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(opt.slot_variables()[-1][2]), avg, rtol=1e-5,
                               atol=1e-6)
    assert int(opt.iterations) == 7
    opt.finalize_variable_values([v])
    np.testing.assert_allclose(np.array(v), avg, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_lookahead_and_lr_multipliers(compiled):
    rng = np.random.default_rng(1)
    w0, b0 = rng.standard_normal(5).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    grads = [(rng.standard_normal(5).astype(np.float32), rng.standard_normal(2).astype(np.float32))
             for _ in range(12)]
    T = 12
    w, b = Variable(w0.copy(), name="kernel"), Variable(b0.copy(), name="norm1/beta")
    opt = pr.optimizers.SGD(0.05, momentum=0.85, nesterov=True, weight_decay=0.01,
                            lookahead=pr.optimizers.Lookahead(5, airbench.LookaheadDecay(T)),
                            lr_multipliers={"beta": 4.0})
    assert opt.lr_multiplier_of(b) == 4.0 and opt.lr_multiplier_of(w) == 1.0
    _run(lambda g1, g2: opt.apply_gradients([(g1, w), (g2, b)]), compiled, grads)
    opt.finalize_variable_values([w, b])
    params = [w0.astype(np.float64), b0.astype(np.float64)]
    vel, slow = [np.zeros(5), np.zeros(2)], [p.copy() for p in params]
    for t, gs in enumerate(grads):
        for i, (g, mult) in enumerate(zip(gs, (1.0, 4.0))):
            params[i] = params[i] - params[i] * 0.01 * 0.05  # decay at the base rate
            vel[i] = 0.85 * vel[i] - 0.05 * mult * g
            params[i] = params[i] + 0.85 * vel[i] - 0.05 * mult * g
        if (t + 1) % 5 == 0:  # airbench: ema.lerp_(w, 1 - decay); w = ema
            decay = 0.95 ** 5 * ((t + 1) / T) ** 3
            for i in range(2):
                slow[i] = decay * slow[i] + (1 - decay) * params[i]
                params[i] = slow[i].copy()
    np.testing.assert_allclose(np.array(w), slow[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(b), slow[1], rtol=1e-5, atol=1e-6)


def test_variable_multiplier_freezes_compiled():
    v = Variable(np.ones(3, np.float32))
    mult = Variable(np.float32(1.0), trainable=False)
    opt = pr.optimizers.SGD(0.1, momentum=0.5)
    opt.set_lr_multiplier(mult, var_list=[v])
    step = pr.compile(lambda g: opt.apply_gradients([(g, v)]))
    g = np.ones(3, np.float32)
    step(g)
    np.testing.assert_allclose(np.array(v), 0.9, rtol=1e-6)
    mult.assign(np.float32(0.0))
    opt.slot_variables()[0][2].assign(np.zeros(3, np.float32))
    step(g)
    step(g)
    np.testing.assert_allclose(np.array(v), 0.9, rtol=1e-6)  # no retrace, no move
    mult.assign(np.float32(2.0))
    step(g)
    np.testing.assert_allclose(np.array(v), 0.9 - 0.2, rtol=1e-6)


def test_optimizer_argument_errors():
    with pytest.raises(ValueError, match="ema_momentum"):
        pr.optimizers.SGD(use_ema=True, ema_momentum=1.5)
    with pytest.raises(ValueError, match="ema_overwrite_frequency"):
        pr.optimizers.SGD(use_ema=True, ema_overwrite_frequency=0)
    with pytest.raises(ValueError, match="combined"):
        pr.optimizers.SGD(use_ema=True, lookahead=pr.optimizers.Lookahead())
    with pytest.raises(ValueError, match="multiplier"):
        pr.optimizers.SGD(lr_multipliers={"bias": -1.0})
    with pytest.raises(ValueError, match="slow_step_size"):
        pr.optimizers.Lookahead(5, 1.5)
    v = Variable(np.ones(2, np.float32))
    opt = pr.optimizers.SGD(0.1, weight_decay=0.1)
    opt.set_lr_multiplier(Variable(np.float32(1.0), trainable=False), var_list=[v])
    with pytest.raises(ValueError, match="weight decay"):
        opt.apply_gradients([(np.ones(2, np.float32), v)])
    np.testing.assert_array_equal(np.array(v), 1.0)  # nothing changed


def test_dirac_conv_is_identity():
    rng = np.random.default_rng(2)
    kernel = pr.initializers.Dirac(fill="glorot_uniform")((3, 3, 4, 6))
    x = rng.standard_normal((2, 5, 5, 4)).astype(np.float32)
    y = np.array(pr.ops.conv2d(x, kernel, padding="same"))
    np.testing.assert_array_equal(y[..., :4], x)  # the first `in` filters copy the input
    assert np.abs(kernel[..., 4:]).max() > 0  # the others from `fill`
    narrow = pr.initializers.Dirac(gain=2.0)((3, 3, 4, 3))
    np.testing.assert_array_equal(np.array(pr.ops.conv2d(x, narrow, padding="same")),
                                  2 * x[..., :3])


def test_patch_whitening_whitens_patches():
    rng = np.random.default_rng(3)
    mix = rng.standard_normal((3, 3))
    images = (rng.standard_normal((40, 8, 8, 3)) @ mix + 0.3).astype(np.float32)
    images[:, 1:] += 0.5 * images[:, :-1]  # correlated neighbours
    init = pr.initializers.PatchWhitening(images, epsilon=0.0)
    kernel = init((2, 2, 3, 24))
    out = np.array(pr.ops.conv2d(images, kernel, padding="valid"), np.float64)
    first = out[..., :12].reshape(-1, 12)
    np.testing.assert_allclose(first.T @ first / len(first), np.eye(12), atol=2e-3)
    np.testing.assert_allclose(out[..., 12:], -out[..., :12], atol=1e-5)
    # the second moments by hand for the first filter's eigenvalue ordering
    patches = np.stack([images[:, i:i + 7, j:j + 7] for i in (0, 1) for j in (0, 1)], axis=3)
    flat = patches.reshape(-1, 12).astype(np.float64)
    np.testing.assert_allclose(init.moments(2, 2), flat.T @ flat / len(flat), rtol=1e-6)
    with pytest.raises(ValueError, match="kernel"):
        init((3, 3, 3, 24))


def test_tta_is_weighted_mean_of_views():
    rng = np.random.default_rng(4)
    pr.utils.set_random_seed(0)
    inp = pr.layers.Input((8, 8, 3))
    out = pr.layers.Dense(4)(pr.layers.Flatten()(pr.layers.Conv2D(5, 3, activation="relu")(inp)))
    model = pr.Model(inp, out)
    model.compile(loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = rng.standard_normal((6, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 4, 6)
    tta = pr.models.TestTimeAugmentation(model)
    got = tta.predict(x, batch_size=4, verbose=0)

    def f(v):
        return model.predict(v, verbose=0).astype(np.float64)

    def mirrored(v):
        return 0.5 * f(v) + 0.5 * f(np.ascontiguousarray(v[:, :, ::-1]))
    pad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")  # PyTorch's reflect
    ref = 0.5 * mirrored(x) + 0.25 * (mirrored(pad[:, 0:8, 0:8]) + mirrored(pad[:, 2:10, 2:10]))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    loss, acc = tta.evaluate(x, y, verbose=0)
    logp = ref - np.log(np.exp(ref).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(6), y].mean(), rtol=1e-5)
    assert acc == pytest.approx(np.mean(ref.argmax(1) == y))
    flip_only = pr.models.TestTimeAugmentation(model, translate=0).predict(x, verbose=0)
    np.testing.assert_allclose(flip_only, mirrored(x), rtol=1e-5, atol=1e-6)


def test_airbench94_network():
    pr.utils.set_random_seed(0)
    images = np.random.default_rng(5).standard_normal((20, 32, 32, 3)).astype(np.float32)
    model = airbench.airbench94(whitening_images=images)
    assert model.output_shape == (None, 10)
    n = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    # whitening bias 24; convs 24*64*9 + 64*64*9 + 64*256*9 + 3*256*256*9; BN betas; head
    assert n == 24 + 9 * (24 * 64 + 64 * 64 + 64 * 256 + 3 * 256 * 256) + 2 * (64 + 256 + 256) \
        + 2560
    assert not model.get_layer("whiten").kernel.trainable
    bn = model.get_layer("group1_norm1")
    assert not bn.scale and bn.momentum == 0.6 and bn.epsilon == 1e-12
    kernel = np.array(model.get_layer("group2_conv2").kernel)
    np.testing.assert_array_equal(kernel[1, 1, np.arange(256), np.arange(256)], 1.0)
    np.testing.assert_allclose(np.array(model.get_layer("whiten").kernel),
                               pr.initializers.PatchWhitening(images)((2, 2, 3, 24)), rtol=1e-6)
    decay = airbench.LookaheadDecay(476)
    for step in (4, 99, 475, 600):
        t = min(step + 1, 476)
        assert float(decay(np.int64(step))) == pytest.approx(1 - 0.95 ** 5 * (t / 476) ** 3,
                                                             rel=1e-6)
    setup = airbench.training_setup(model, 48)
    assert setup["total_steps"] == 476 and setup["epochs"] == 10
    opt = setup["optimizer"]
    assert float(opt.learning_rate) == pytest.approx(1.5 * 0.2)
    assert opt.lr_multiplier_of(bn.beta) == 64.0


def test_recipe_command_line():
    from pyresnet.train import parse_args  # noqa: PLC0415
    args = parse_args(["--recipe", "airbench94"])
    assert (args.batch_size, args.epochs, args.model) == (1024, 9.9, "airbench94")
    assert parse_args(["--recipe", "airbench94", "--epochs", "1"]).epochs == 1
    assert parse_args([]).batch_size == 128 and parse_args([]).epochs == 36
    with pytest.raises(SystemExit):
        parse_args(["--recipe", "airbench94", "--lr", "0.1"])
    with pytest.raises(SystemExit):
        parse_args(["--epochs", "2.5"])


def test_ema_slots_save_and_load(tmp_path):
    pr.utils.set_random_seed(0)
    inp = pr.layers.Input((4,))
    model = pr.Model(inp, pr.layers.Dense(2)(inp))
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9, use_ema=True,
                                              ema_momentum=0.5), loss="mse")
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    for _ in range(3):
        model.train_on_batch(x, np.zeros((8, 2), np.float32))
    model.save(tmp_path / "m.keras")
    loaded = pr.models.load_model(tmp_path / "m.keras")
    assert loaded.optimizer.use_ema and loaded.optimizer.ema_momentum == 0.5
    before = [(n, np.array(s)) for n, _, s in model.optimizer.slot_variables()]
    after = [(n, np.array(s)) for n, _, s in loaded.optimizer.slot_variables()]
    assert [n for n, _ in before] == [n for n, _ in after] == ["velocity"] * 2 + ["average"] * 2
    for (_, a), (_, b) in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_stop_at_step_counts_optimizer_steps():
    inp = pr.layers.Input((4,))
    model = pr.Model(inp, pr.layers.Dense(2)(inp))
    model.compile(optimizer=pr.optimizers.SGD(0.1), loss="mse")
    x, y = np.zeros((40, 4), np.float32), np.zeros((40, 2), np.float32)
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0,
                        callbacks=[airbench.StopAtStep(23)])
    assert int(model.optimizer.iterations) == 23 and len(history.history["loss"]) == 3


class _ZeroRateAfter(pr.callbacks.Callback):
    """The freeze FreezeAfter replaced: a zero learning-rate multiplier and a
    zeroed velocity from ``epoch`` on, in the same compiled step."""

    def __init__(self, variable, multiplier, epoch):
        super().__init__()
        self.variable, self.multiplier, self.epoch = variable, multiplier, epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.multiplier.assign(np.float32(0.0 if epoch >= self.epoch else 1.0))
        if epoch >= self.epoch:
            for name, var, slot in self.model.optimizer.slot_variables():
                if name == "velocity" and var is self.variable:
                    slot.assign(np.zeros(slot.shape, np.float32))


def _frozen_run(freeze):
    pr.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, 24).astype(np.int32)
    model = airbench.airbench94(widths=(4, 8, 8), whitening_images=x)
    setup = airbench.training_setup(model, 3, train_epochs=4)
    bias = model.get_layer("whiten").bias
    if freeze == "trainable":
        callbacks = [airbench.FreezeAfter([bias], 2)]
    else:
        multiplier = Variable(np.float32(1.0), trainable=False)
        setup["optimizer"].set_lr_multiplier(multiplier, var_list=[bias])
        callbacks = [_ZeroRateAfter(bias, multiplier, 2)]
    model.compile(optimizer=setup["optimizer"], loss=setup["loss"])
    ops = []

    class Ops(pr.callbacks.Callback):  # the step each epoch runs: its conv input gradients
        def on_epoch_end(self, epoch, logs=None):
            nodes = self.model.train_function.get_concrete_function((x[:8], y[:8])).nodes
            ops.append(sum(n["op"] == "conv2d_backprop_input" for n in nodes))

    model.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0,
              callbacks=callbacks + [Ops()])
    return model, ops


def test_freeze_after_retraces_without_the_frozen_gradients():
    """FreezeAfter's step without the whitening bias gives bit for bit the
    weights of a zero-rate freeze inside the same step (Lookahead still
    averages the bias) and no longer runs the 24->64 input gradient, which
    only the bias needed."""
    frozen, ops = _frozen_run("trainable")
    zero_rate, ops_before = _frozen_run("zero rate")
    assert ops_before == [6] * 4 and ops == [6, 6, 5, 5]
    assert not frozen.get_layer("whiten").bias.trainable
    for a, b in zip(frozen.weights, zero_rate.weights):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=a.path)


def test_freeze_after_resumed_equals_uninterrupted(tmp_path):
    """A run stopped after the whitening bias froze and resumed from its
    backup ends with the uninterrupted run's weights: the restored optimizer
    keeps averaging the frozen bias (Lookahead), as the run that froze it.
    3 steps an epoch, the bias frozen from step 6, Lookahead's syncs after
    steps 5, 10 and 15: the bias moved at step 6 after the first sync, the
    run stops after step 9, and the sync after step 10 moves it again."""
    def run(epochs, backup):
        pr.utils.set_random_seed(4)
        rng = np.random.default_rng(4)
        x = rng.standard_normal((24, 32, 32, 3)).astype(np.float32)
        y = rng.integers(0, 10, 24).astype(np.int32)
        model = airbench.airbench94(widths=(4, 8, 8), whitening_images=x)
        setup = airbench.training_setup(model, 3, train_epochs=5)
        model.compile(optimizer=setup["optimizer"], loss=setup["loss"])
        callbacks = [airbench.FreezeAfter([model.get_layer("whiten").bias], 2)]
        if backup:
            callbacks.append(pr.callbacks.BackupAndRestore(str(backup), delete_checkpoint=False))
        model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0,
                  callbacks=callbacks)
        return model

    whole = run(5, None)
    stopped = run(3, tmp_path / "backup")
    resumed = run(5, tmp_path / "backup")
    bias = [np.array(m.get_layer("whiten").bias) for m in (stopped, whole)]
    assert not np.array_equal(*bias)  # the sync after the resume moved the frozen bias
    for a, b in zip(whole.weights, resumed.weights):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=a.path)
