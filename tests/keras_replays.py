"""NumPy float32 replays of Keras 3 optimizer steps, op by op, shared by the
state-op tests (test_ops_state.py) and the optimizer tests
(test_optimizers.py)."""
import numpy as np

f32 = np.float32


def keras_sgd(w, grads, lrs, momentum=0.0, nesterov=False, wd=None):
    """Keras 3 SGD (keras/src/optimizers/sgd.py) with the base optimizer's
    weight decay, over the steps ``zip(grads, lrs)`` in float32.

    Returns:
        ``(w, m)``: the weights and the momentum buffer after the last step
        (``m`` stays zero without momentum).
    """
    w, m = w.copy(), np.zeros_like(w)
    for g, lr in zip(grads, lrs):
        lr = f32(lr)
        if wd:
            w = w - w * f32(wd) * lr
        if momentum:
            m = m * f32(momentum) - g * lr
            w = w + (m * f32(momentum) - g * lr if nesterov else m)
        else:
            w = w - g * lr
    return w, m
