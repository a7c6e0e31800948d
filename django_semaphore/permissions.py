"""The app's permissions as ``user.has_perm`` names them (models.py declares them).

One place, because two faces check the first: the dashboard's pages and the
metrics endpoint show the same state (partition keys among it), so the same
staff may look at both.
"""

from __future__ import annotations

VIEW = "django_semaphore.view_semaphore_dashboard"
RELEASE = "django_semaphore.release_semaphore_permit"
