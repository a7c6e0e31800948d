"""The API stacks' test site: REST framework views and a Django Ninja API, per-user limited, with token auth.

Used in process (``@pytest.mark.urls``) and by the real server the system
tests start (tests/support/api_asgi.py). Alice and Bob authenticate with
the tokens ``TOKENS`` names: REST framework's ``Token`` table serves both
stacks. A view asked ``?hold=<list>`` keeps its request (and its permit)
until the test pushes to that Redis list.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model, login
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from ninja import NinjaAPI, Router
from ninja.security import HttpBearer
from rest_framework import routers, viewsets
from rest_framework.authentication import BaseAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.exceptions import APIException, NotFound
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from django_semaphore.decorators import semaphore
from django_semaphore.ninja import semaphore as ninja_semaphore
from django_semaphore.rest_framework import SemaphoreThrottle

from .api_declared import SCOPES, SEMAPHORES, TOKENS  # noqa: F401 - the tests import them from here too
from .views import work_with_a_deadline
from .workers import Referee

# The key functions saw these request types (a test reads it).
KEYED: list[type] = []


def make_users() -> None:
    """Alice and Bob, with their tokens (idempotent)."""
    users = get_user_model()
    for name, key in TOKENS.items():
        user, _ = users.objects.get_or_create(username=name)
        Token.objects.get_or_create(user=user, defaults={"key": key})


def hold(request: HttpRequest) -> None:
    """Keep the request until the test pushes to the Redis list ``?hold=`` names (30 s at most)."""
    listed = request.GET.get("hold")
    if listed:
        client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
        try:
            client.blpop([listed], timeout=30)
        finally:
            client.close()


def counted(request: HttpRequest, user: Any, weight: int) -> None:
    """Count this request inside (by its weight) in the contention test's referee, for a moment."""
    limit = SEMAPHORES["counted"]["limit"]
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    base = f"{os.environ.get('SEMAPHORE_KEY_PREFIX', '')}referee:{user.pk}:"
    try:
        with Referee(client, base, limit).entered(weight):
            time.sleep(0.01)
    finally:
        client.close()


def plain_errors(error: Exception, context: dict[str, Any]) -> Response | None:
    """A site's own EXCEPTION_HANDLER: its error format, built without REST framework's default handler."""
    if isinstance(error, APIException):
        return Response({"error": {"code": error.get_codes(), "message": str(error.detail)}}, status=error.status_code)
    return None


def tenant_key(request: Any) -> str:
    KEYED.append(type(request))
    return str(request.headers.get("X-Tenant", ""))


# -- REST framework ----------------------------------------------------------------------------------


class TokenView(APIView):
    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)
    throttle_classes = (SemaphoreThrottle,)

    def get(self, request: Request) -> Response:
        hold(request)
        return Response({"user": request.user.username, "outcome": request.semaphore.outcome})


class Items(TokenView):
    semaphore = "api"


class Items429(TokenView):
    semaphore = "api_429"


class Upload(TokenView):
    throttle_scope = "uploads"  # SEMAPHORE_THROTTLE_SCOPES maps it


class Heavy(TokenView):
    semaphore = "heavy"
    semaphore_weight = 2


class Waiting(TokenView):
    semaphore = "api"
    semaphore_wait = 5


class Tenants(TokenView):
    semaphore = "tenants"


class Strict(TokenView):
    semaphore = "strict"


class Stream(TokenView):
    semaphore = "api"

    def get(self, request: Request) -> StreamingHttpResponse:  # type: ignore[override]
        return StreamingHttpResponse(iter([b"one", b"two"]))


class Broken(TokenView):
    semaphore = "api"

    def get(self, request: Request) -> Response:
        raise RuntimeError("the view failed")


class Missing(TokenView):
    semaphore = "api"

    def get(self, request: Request) -> Response:
        raise NotFound("no such item")


class Orders(viewsets.ViewSet):
    """A viewset through a router: its actions are the handlers that take the permit."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)
    throttle_classes = (SemaphoreThrottle,)
    semaphore = "api"

    def list(self, request: Request) -> Response:
        return Response({"user": request.user.username, "outcome": request.semaphore.outcome})

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response({"pk": pk, "outcome": request.semaphore.outcome})


drf_router = routers.SimpleRouter()
drf_router.register("drf/orders", Orders, basename="drf-orders")


class Counted(TokenView):
    semaphore = "counted"

    def get(self, request: Request) -> Response:
        counted(request, request.user, getattr(self, "semaphore_weight", None) or 1)
        return Response({"user": request.user.username})


class CountedHeavy(Counted):
    semaphore_weight = 2


class KeyOnly(BaseAuthentication):
    """An API key that names no user: REST framework's request.user is then anonymous, request.auth the key."""

    def authenticate(self, request: Request) -> tuple[None, str] | None:
        key = request.headers.get("X-Api-Key")
        return None if not key else (None, key)


class KeyOnlyItems(Items):
    authentication_classes = (KeyOnly,)
    permission_classes = (AllowAny,)

    def get(self, request: Request) -> Response:
        return Response({"outcome": request.semaphore.outcome})


class RateRefused(BaseThrottle):
    """A rate throttle that refuses every request, asking for 7 s."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        return False

    def wait(self) -> float:
        return 7


class RatedFirst(Waiting):
    throttle_classes = (RateRefused, SemaphoreThrottle)


class RatedLast(Waiting):
    throttle_classes = (SemaphoreThrottle, RateRefused)


@method_decorator(semaphore("api"), name="dispatch")
class Decorated(APIView):
    """The route issue 32 found passing in silence: the decorator runs before the token is read (W009)."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)

    def get(self, request: Request) -> Response:
        hold(request)
        return Response({"user": request.user.username})


@method_decorator(semaphore("api"), name="get")
class HandlerDecorated(APIView):
    """The decorator on a handler: it runs after the view's authentication, with REST framework's request."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)

    def get(self, request: Request) -> Response:
        return Response({"user": request.user.username, "outcome": request.semaphore.outcome})


@semaphore("api")
@api_view(["GET"])
@authentication_classes([TokenAuthentication])
@permission_classes([IsAuthenticated])
def decorated_function(request: Request) -> Response:
    """A function view whose decorator runs before its authentication (W009 names it)."""
    return Response({"user": request.user.username})


# -- Django Ninja ------------------------------------------------------------------------------------


class Bearer(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = Token.objects.select_related("user").filter(key=token).first()
        return None if found is None else found.user


class TokenOnly(HttpBearer):
    """An auth that returns the token itself, not a user: a user key cannot tell whose request it is."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        return token if token in TOKENS.values() else None


api = NinjaAPI(auth=Bearer(), urls_namespace="tests-ninja")


@api.get("/items")
@ninja_semaphore("api")
def ninja_items(request: HttpRequest) -> dict[str, Any]:
    hold(request)
    return {"user": request.auth.username, "outcome": request.semaphore.outcome}  # type: ignore[attr-defined]


@api.get("/items-429")
@ninja_semaphore("api_429")
def ninja_items_429(request: HttpRequest) -> dict[str, Any]:
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/async-items")
@ninja_semaphore("api")
async def ninja_async_items(request: HttpRequest) -> dict[str, Any]:
    await sync_to_async(hold)(request)
    return {"user": request.auth.username, "outcome": request.semaphore.outcome}  # type: ignore[attr-defined]


@api.get("/waiting")
@ninja_semaphore("api", wait=5)
async def ninja_waiting(request: HttpRequest) -> dict[str, Any]:
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/heavy")
@ninja_semaphore("heavy", weight=2)
def ninja_heavy(request: HttpRequest) -> dict[str, Any]:
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/strict")
@ninja_semaphore("strict")
def ninja_strict(request: HttpRequest) -> dict[str, Any]:
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/broken")
@ninja_semaphore("api")
def ninja_broken(request: HttpRequest) -> dict[str, Any]:
    raise RuntimeError("the operation failed")


@api.get("/stream")
@ninja_semaphore("api")
def ninja_stream(request: HttpRequest) -> HttpResponse:
    return StreamingHttpResponse(iter([b"one", b"two"]))


@api.get("/token-only", auth=TokenOnly())
@ninja_semaphore("api")
def ninja_token_only(request: HttpRequest) -> dict[str, Any]:
    return {"auth": "token"}


@api.get("/plain-decorator")
@semaphore("api")
def ninja_plain_decorator(request: HttpRequest) -> dict[str, Any]:
    """The plain view decorator under Ninja's operation: it sees request.user, not Ninja's auth (W009)."""
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/counted")
@ninja_semaphore("counted")
def ninja_counted(request: HttpRequest) -> dict[str, Any]:
    counted(request, request.auth, 1)  # type: ignore[attr-defined]
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/async-counted")
@ninja_semaphore("counted", weight=2)
async def ninja_async_counted(request: HttpRequest) -> dict[str, Any]:
    await sync_to_async(counted)(request, request.auth, 2)  # type: ignore[attr-defined]
    return {"user": request.auth.username}  # type: ignore[attr-defined]


@api.get("/working-with-a-deadline", auth=None)
@ninja_semaphore("guarded")
async def ninja_working_with_a_deadline(request: HttpRequest) -> HttpResponse:
    """Gives up on its sync work after a deadline and answers 504 (tests/web/test_client_leaves.py)."""
    return await work_with_a_deadline()


router = Router()
router.add_decorator(ninja_semaphore("api"), mode="view")


@router.get("/items")
def routed_items(request: HttpRequest) -> dict[str, Any]:
    hold(request)
    return {"user": request.auth.username, "outcome": request.semaphore.outcome}  # type: ignore[attr-defined]


@router.get("/async-items")
async def routed_async_items(request: HttpRequest) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"user": request.auth.username}  # type: ignore[attr-defined]


api.add_router("/routed", router)

plainly_routed = Router()
plainly_routed.add_decorator(semaphore("api"), mode="view")  # the plain view decorator, around each run: W009


@plainly_routed.get("/items")
def plain_router_items(request: HttpRequest) -> dict[str, Any]:
    return {"user": request.auth.username}  # type: ignore[attr-defined]


api.add_router("/plainly-routed", plainly_routed)


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    """The WebSocket tests' way to a session cookie (AuthMiddlewareStack reads it); tests only."""
    login(request, get_user_model().objects.get(username=username), backend="django.contrib.auth.backends.ModelBackend")
    return HttpResponse("logged in")


urlpatterns = [
    path("drf/items/", Items.as_view(), name="drf-items"),
    path("drf/items-429/", Items429.as_view()),
    path("drf/upload/", Upload.as_view()),
    path("drf/heavy/", Heavy.as_view()),
    path("drf/waiting/", Waiting.as_view()),
    path("drf/tenants/", Tenants.as_view()),
    path("drf/strict/", Strict.as_view()),
    path("drf/stream/", Stream.as_view()),
    path("drf/broken/", Broken.as_view()),
    path("drf/missing/", Missing.as_view()),
    path("drf/key-only/", KeyOnlyItems.as_view()),
    path("drf/counted/", Counted.as_view()),
    path("drf/counted-heavy/", CountedHeavy.as_view()),
    path("drf/rated-first/", RatedFirst.as_view()),
    path("drf/rated-last/", RatedLast.as_view()),
    path("drf/decorated/", Decorated.as_view(), name="drf-decorated"),
    path("drf/handler-decorated/", HandlerDecorated.as_view()),
    path("drf/decorated-function/", decorated_function),
    path("ninja/", api.urls),
    path("login/<str:username>/", log_in),
    *drf_router.urls,
]
