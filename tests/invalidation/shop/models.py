"""The shop's models. ``app_label`` is explicit: the tests import them before installing the
app, which they do per test (``tests/invalidation/conftest.py``)."""

from __future__ import annotations

from django.db import models


class Category(models.Model):
    name = models.CharField(max_length=50)

    class Meta:
        app_label = "invalidation_shop"


class Tag(models.Model):
    name = models.CharField(max_length=50)

    class Meta:
        app_label = "invalidation_shop"


class Product(models.Model):
    name = models.CharField(max_length=50)
    category = models.ForeignKey(Category, on_delete=models.CASCADE, related_name="products")
    tags = models.ManyToManyField(Tag, related_name="products", blank=True)

    class Meta:
        app_label = "invalidation_shop"
