from django.db import migrations


class Migration(migrations.Migration):
    """The waiting rooms' bypass permission (``django_semaphore.bypass_waiting_room``); still no table."""

    dependencies = (("django_semaphore", "0001_initial"),)

    operations = (
        migrations.AlterModelOptions(
            name="semaphoredashboard",
            options={
                "verbose_name": "semaphore dashboard",
                "verbose_name_plural": "semaphores",
                "permissions": (
                    ("view_semaphore_dashboard", "Can view the semaphore dashboard"),
                    ("release_semaphore_permit", "Can force-release permits and override semaphore limits"),
                    ("bypass_waiting_room", "Can pass waiting rooms by"),
                ),
                "managed": False,
                "default_permissions": (),
            },
        ),
    )
