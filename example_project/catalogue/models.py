"""The catalogue: products, created by the data migration 0002 (a few hundred of them)."""

from __future__ import annotations

from django.db import models


class Product(models.Model):
    name = models.CharField(max_length=100)
    category = models.CharField(max_length=40, db_index=True)
    price = models.DecimalField(max_digits=8, decimal_places=2)
    units_sold = models.PositiveIntegerField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
