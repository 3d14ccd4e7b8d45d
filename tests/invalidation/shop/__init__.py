"""A small shop (categories, products, tags) whose models invalidate their cache tags."""
