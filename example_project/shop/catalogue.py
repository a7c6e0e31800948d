"""The shop's data and its stand-in for slow work (a real site would query, render, call out)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.http import HttpRequest

# ``?seconds=`` lets you (and the tests) change how long the slow views take, within reason.
MAX_SECONDS = 10.0


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    price: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


PRODUCTS = [
    Product("lamp-01", "Desk lamp", "24.00"),
    Product("lamp-02", "Floor lamp", "79.00"),
    Product("chair-01", "Oak chair", "120.00"),
    Product("chair-02", "Folding chair", "35.00"),
    Product("table-01", "Kitchen table", "260.00"),
    Product("shelf-01", "Wall shelf", "42.00"),
    Product("rug-01", "Wool rug", "150.00"),
    Product("mug-01", "Stoneware mug", "9.50"),
]
BY_SKU = {product.sku: product for product in PRODUCTS}


def work_seconds(request: HttpRequest, default: float) -> float:
    """How long this request's pretend work lasts: ``?seconds=`` or the view's default."""
    try:
        seconds = float(request.GET.get("seconds", default))
    except ValueError:
        return default
    return min(max(seconds, 0.0), MAX_SECONDS)


def matching(query: str) -> list[Product]:
    words = query.lower().split()
    return [product for product in PRODUCTS if all(word in product.name.lower() for word in words)]
