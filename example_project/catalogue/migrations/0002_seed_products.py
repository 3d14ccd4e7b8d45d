"""Seed the catalogue: 480 products in 8 categories, the same ones on every machine."""

import random
from decimal import Decimal

from django.db import migrations

CATEGORIES = ["books", "games", "garden", "kitchen", "music", "outdoor", "toys", "tools"]
ADJECTIVES = ["Classic", "Compact", "Deluxe", "Eco", "Pocket", "Pro", "Smart", "Vintage"]
NOUNS = ["Kit", "Set", "Box", "Pack", "Bundle", "Edition"]
PRODUCTS_PER_CATEGORY = 60


def seed(apps, schema_editor):
    Product = apps.get_model("catalogue", "Product")
    rng = random.Random(42)
    products = []
    for category in CATEGORIES:
        for number in range(PRODUCTS_PER_CATEGORY):
            name = f"{rng.choice(ADJECTIVES)} {category} {rng.choice(NOUNS)} #{number + 1}"
            price = Decimal(rng.randint(199, 19999)) / 100
            products.append(
                Product(name=name, category=category, price=price, units_sold=rng.randint(0, 5000))
            )
    Product.objects.bulk_create(products)


def unseed(apps, schema_editor):
    apps.get_model("catalogue", "Product").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("catalogue", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
