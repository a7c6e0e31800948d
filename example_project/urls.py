from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("reports/export/", views.export_report, name="export-report"),
    path("admin/", admin.site.urls),
]
