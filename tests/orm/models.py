"""A small shop: categories, products (a foreign key) and labels (a many-to-many)."""

from __future__ import annotations

from django.db import models

from stampede.orm import CachedManager, CachedQuerySet


class Category(models.Model):
    name = models.CharField(max_length=50)

    objects = CachedQuerySet.as_manager()

    class Meta:
        app_label = "orm"


class Label(models.Model):
    name = models.CharField(max_length=50)

    objects = CachedQuerySet.as_manager()

    class Meta:
        app_label = "orm"


class Product(models.Model):
    name = models.CharField(max_length=50)
    price = models.IntegerField(default=0)
    category = models.ForeignKey(Category, models.CASCADE, related_name="products")
    labels = models.ManyToManyField(Label, related_name="products")

    objects = CachedQuerySet.as_manager()
    soft = CachedManager(timeout=60, soft=True)

    class Meta:
        app_label = "orm"
