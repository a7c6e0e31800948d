from django.apps import AppConfig


class ShopConfig(AppConfig):
    """A small shop whose expensive pages are guarded by semaphores."""

    name = "example_project.shop"
    label = "shop"
    verbose_name = "Example shop"
