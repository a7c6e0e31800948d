"""The API stacks' real server: Django over HTTP, Channels over WebSocket, one ASGI application for uvicorn.

It makes its database (``API_SITE_DB``, a file) and its users as it starts, unless ``API_SITE_READY`` says
they are made (uvicorn's ``--workers`` import it inside their event loop, where the database is off limits).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.api_settings")

from django.core.asgi import get_asgi_application

http = get_asgi_application()  # sets Django up before the consumers' and the views' modules load

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tests.support.api_consumers import websocket_urlpatterns  # noqa: E402
from tests.support.api_urls import make_users  # noqa: E402

if not os.environ.get("API_SITE_READY"):  # worker processes import this inside their event loop: made before
    call_command("migrate", verbosity=0, interactive=False)
    make_users()

application = ProtocolTypeRouter({"http": http, "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns))})
