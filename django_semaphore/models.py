"""A model with no table, so the dashboard gets permissions and a place in the admin index.

This is the usual way for an admin page that shows data from elsewhere
(django-rq does the same): the admin lists models, and permissions belong
to models. Viewing and releasing are separate permissions, because taking a
permit away from a running job is not the same as looking at it. The third
lets a user pass every waiting room by (a room's ``bypass_permission``).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class SemaphoreDashboard(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = (
            ("view_semaphore_dashboard", _("Can view the semaphore dashboard")),
            ("release_semaphore_permit", _("Can force-release permits and override semaphore limits")),
            # Waiting rooms (waiting_room.py): a user with it passes every room by, neither queued nor counted.
            ("bypass_waiting_room", _("Can pass waiting rooms by")),
        )
        verbose_name = _("semaphore dashboard")
        verbose_name_plural = _("semaphores")
