"""The dashboard's tests log in as staff who may look (``viewer``), or look and release (``operator``)."""

from __future__ import annotations

import pytest
from django.test import Client

from ..support.dashboard import staff


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(staff("viewer", "view_semaphore_dashboard"))
    return client


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(staff("operator", "view_semaphore_dashboard", "release_semaphore_permit"))
    return client
