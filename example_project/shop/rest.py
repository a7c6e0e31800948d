"""A small REST framework API with token authentication and a per-user limit.

Its clients send ``Authorization: Token <key>`` (``make demo`` prints the
demo users' keys). REST framework reads the token inside the view, so the
limit is a throttle, which runs after that: ``SemaphoreThrottle`` takes the
user's permit of ``"orders"`` (2 at once per user, settings.py), and a third
overlapping request of the same user gets REST framework's own JSON error,
503 with ``Retry-After``; another user is not slowed down.
"""

from __future__ import annotations

import time

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_semaphore.rest_framework import SemaphoreThrottle

from .catalogue import PRODUCTS, work_seconds


class Orders(APIView):
    """The user's orders: slow to assemble (``?seconds=N`` makes it slower)."""

    authentication_classes = (TokenAuthentication, SessionAuthentication)
    permission_classes = (IsAuthenticated,)
    throttle_classes = (SemaphoreThrottle,)
    semaphore = "orders"

    def get(self, request: Request) -> Response:
        time.sleep(work_seconds(request, 1.0))
        orders = [{"sku": product.sku, "units": index} for index, product in enumerate(PRODUCTS[:3], 1)]
        return Response({"user": request.user.get_username(), "orders": orders})
