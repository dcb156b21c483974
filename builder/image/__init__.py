"""Build the serving image: recipe (build args), context, labels, docker SDK build, base pinning."""

from builder.image.build import BuiltImage, build_image
from builder.image.pin import pin_target
from builder.image.recipe import BuildRecipe, build_recipe, image_tag

__all__ = ["BuildRecipe", "BuiltImage", "build_image", "build_recipe", "image_tag", "pin_target"]
