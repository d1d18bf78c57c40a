"""The plain training step that several tests compile or run eagerly
(test_loops.py, test_mixed_precision.py, test_tensorboard_graph.py and the
MPI worker)."""
import pyresnet as pr


def train_step_fn(model, loss_fn, optimizer):
    """The eager step ``train_step(x, y)``: ``loss_fn(y, model(x,
    training=True))`` under a GradientTape, its gradients applied to the
    trainable weights by ``optimizer``; returns the loss.  Callers compile it
    (or not) as their test needs."""
    def train_step(x, y):
        with pr.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        return loss

    return train_step
