from django.urls import path

from . import api, rest, views

urlpatterns = [
    path("", views.home, name="home"),
    path("reports/export/", views.export_report, name="export-report"),
    path("search/", views.search, name="search"),
    path("prices/", views.supplier_prices, name="supplier-prices"),
    path("prices/refresh/", views.queue_price_refreshes, name="queue-price-refreshes"),
    path("downloads/catalogue.csv", views.download_catalogue, name="download-catalogue"),
    path("inventory/", views.InventoryView.as_view(), name="inventory"),
    path("api/products/", api.products, name="api-products"),
    path("api/products/<slug:sku>/", api.product, name="api-product"),
    path("api/health/", api.health, name="api-health"),
    path("rest/orders/", rest.Orders.as_view(), name="rest-orders"),
    path("live/", views.live, name="live"),
    path("launch/", views.launch, name="launch"),
    path("launch/buy/", views.launch_buy, name="launch-buy"),
]
