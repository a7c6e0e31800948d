from django.db import migrations, models


class Migration(migrations.Migration):
    """No table is created (``managed=False``): the model only carries the dashboard's permissions."""

    initial = True

    dependencies = ()

    operations = (
        migrations.CreateModel(
            name="SemaphoreDashboard",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
            ],
            options={
                "verbose_name": "semaphore dashboard",
                "verbose_name_plural": "semaphores",
                "permissions": (
                    ("view_semaphore_dashboard", "Can view the semaphore dashboard"),
                    ("release_semaphore_permit", "Can force-release permits and override semaphore limits"),
                ),
                "managed": False,
                "default_permissions": (),
            },
        ),
    )
