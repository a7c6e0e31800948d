"""The surface views (tests/support/surface_urls.py) as a real ASGI server's application, with Python's cyclic
garbage collector off in that server: a response kept by a reference cycle stays kept, as it may for minutes
in a busy server between two collections."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.surface_asgi_settings")
gc.disable()

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
