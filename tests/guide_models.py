"""Models that more than one Keras-guide walk-through builds
(tests/keras_usage/): the GAN of "Customizing what happens in fit()" and
"Writing a training loop from scratch"."""
import pyresnet as keras
from pyresnet import layers


def gan_models(latent_dim):
    """The guides' discriminator and generator (fewer filters): 28x28x1
    images to one logit, and ``latent_dim`` noise to 28x28x1 images."""
    discriminator = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(32, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ], name="discriminator")
    generator = keras.Sequential([
        keras.Input(shape=(latent_dim,)),
        layers.Dense(7 * 7 * 16),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, 16)),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ], name="generator")
    return discriminator, generator
