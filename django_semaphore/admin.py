"""Admin autodiscovery imports this module; the dashboard lives in ``dashboard/``."""

from .dashboard import admin  # noqa: F401  (registers the dashboard with the admin site)
