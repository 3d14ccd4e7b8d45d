"""Model-driven tag invalidation: a model's changes invalidate its cache tags once they commit.

Why after the commit (``transaction.on_commit``): a reader that refilled between an
invalidation and the commit would load the old rows again and keep them as fresh; a reader
that refills after the commit loads the new rows; and a transaction that rolls back
invalidates nothing. Outside a transaction (autocommit) the write is already committed, and
``on_commit`` runs at once.

What sends what. Django's model signals are sync; ``asave``, ``adelete`` and the async
related managers run the sync methods in a thread, so they send the same signals.

- ``Model.save``/``delete``, ``QuerySet.delete`` and cascades (Django's collector sends
  ``pre_delete`` per row whenever a receiver is connected, so a registered model is never
  fast-deleted: its rows are loaded first), and the m2m managers' ``add``/``remove``/
  ``clear``/``set``: signals, handled once a model is registered with
  :func:`invalidate_on_change`. A delete also drops the row's m2m links, with no
  ``m2m_changed``: the linked rows of a registered model are invalidated with it.
- ``QuerySet.update``, ``bulk_create`` and ``bulk_update``: no signal. :func:`update` and
  :func:`bulk_update` here run them and invalidate; after ``bulk_create``, call
  :func:`invalidate_tags_on_commit` with the new rows' tags.

It imports Django's ORM, so nothing imports it for you: ``from stampede.invalidation import
...`` (``stampede/__init__.py`` stays free of it).
"""

from __future__ import annotations

import string
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import AppRegistryNotReady, FieldDoesNotExist, ImproperlyConfigured
from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from .adapter.cache_settings import stampede_cache
from .core.tags import checked_tags

__all__ = [
    "TagSpec",
    "aupdate",
    "bulk_update",
    "invalidate_on_change",
    "invalidate_tags_on_commit",
    "update",
]

#: A tag of a registered model: a format string over the instance's columns
#: (``"product:{pk}"``, ``"category:{category_id}"``) or a callable ``instance -> tags``.
TagSpec = str | Callable[[Any], Iterable[str]]

# The rows read per query by the helpers (below SQLite's oldest limit of 999 parameters).
_CHUNK = 500
# Where pre_save leaves a row's columns as they were, for post_save (popped there).
_BEFORE = "_stampede_invalidation_before"
_FORMATTER = string.Formatter()


# -- on commit -------------------------------------------------------------------------------


# Per connection (so per thread, as Django's connections are), the open batch of each (cache,
# soft): the tags the hooks of one commit have invalidated so far, so that a row saved five
# times in one atomic block writes its stamps once. A batch closes when its first hook runs;
# one left open by a rollback is joined by the next transaction, which is harmless: it is
# empty, since none of its hooks ran.
_open: weakref.WeakKeyDictionary[Any, dict[tuple[str, bool], set[str]]] = (
    weakref.WeakKeyDictionary()
)


def invalidate_tags_on_commit(
    *tags: str, cache: str = "default", soft: bool = True, using: str | None = None
) -> None:
    """Invalidate ``tags`` in ``caches[cache]`` once the transaction of ``using`` commits.

    As ``transaction.on_commit``: at once outside a transaction, nothing on a rollback, and
    nothing for a call made inside a savepoint that rolls back. Within one transaction a tag
    is written once however many calls name it: each call's hook invalidates only what no
    earlier hook of the same commit did (so a hook dropped with its savepoint drops only its
    own tags). ``soft`` as for ``StampedeCache.invalidate_tags``.

    Tags and the cache are checked here, at the call, rather than in the hook, where an error
    would come after the commit. An error of the cache in the hook (Redis unreachable)
    propagates from the commit, as any ``on_commit`` callback's does: the rows are committed,
    and the entries stay as they were until their timeout.

    Raises:
        TypeError, ValueError: a tag is not a name ``stampede.core.tags.checked_tags`` takes.
        ImproperlyConfigured: ``cache`` is not an alias of a cache with ``invalidate_tags``.
    """
    names = checked_tags(tags)
    _tag_cache(cache)
    if not names:
        return
    batches = _open.setdefault(transaction.get_connection(using), {})
    key = (cache, soft)
    done = batches.setdefault(key, set())

    def invalidate() -> None:
        if batches.get(key) is done:
            del batches[key]  # a call from now on belongs to the next transaction
        fresh = [name for name in names if name not in done]
        if fresh:
            _tag_cache(cache).invalidate_tags(*fresh, soft=soft)
            done.update(fresh)

    transaction.on_commit(invalidate, using=using)


def _tag_cache(alias: str) -> Any:
    """Return ``caches[alias]``, or raise ``ImproperlyConfigured`` if it cannot take tags."""
    return stampede_cache(alias, "tags")


# -- registration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Registration:
    """What a registered model invalidates in one cache, in one mode."""

    formats: tuple[str, ...]
    callables: tuple[Callable[[Any], Iterable[str]], ...]
    columns: tuple[tuple[str, str], ...]  # (a name a format uses, the attribute it reads)
    cache: str
    soft: bool

    def tags(
        self, instance: Any, row: dict[str, Any] | None = None, callables: bool = True
    ) -> tuple[str, ...]:
        """Return the tags of ``instance``, reading the columns ``row`` holds from it instead;
        without ``callables``, only the format strings' tags."""
        row = row or {}
        values = {
            name: row[attname] if attname in row else getattr(instance, attname)
            for name, attname in self.columns
        }
        found = [spec.format_map(values) for spec in self.formats]
        if callables:
            for spec in self.callables:
                found.extend(spec(instance))
        try:
            return checked_tags(found)
        except (TypeError, ValueError) as exc:
            label = type(instance)._meta.label
            raise type(exc)(f"invalidate_on_change({label}): {exc}") from exc


_registry: dict[type[models.Model], dict[tuple[str, bool], _Registration]] = {}
# The m2m field of each through model whose changes a registered model receives.
_m2m_fields: dict[type[models.Model], models.ManyToManyField] = {}


def invalidate_on_change(
    model: type[models.Model], *tags: TagSpec, cache: str = "default", soft: bool = True
) -> None:
    """Invalidate ``tags`` of a ``model`` row, on commit, whenever it is saved, deleted, or
    its many-to-many links (either side) are added, removed or cleared.

    Each tag is a format string over the row's columns (``"product:{pk}"``,
    ``"category:{category_id}"``: ``pk`` and concrete fields by name, foreign keys by their
    column ``<name>_id``), or a callable that takes the instance and returns its tags. A save
    that moves a row (``category_id`` 3 -> 4) invalidates the tags of before and after: a
    ``pre_save`` receiver reads the row's old columns first. That costs one query per save
    of an existing row, and only when a format string names a column other than ``pk`` (a
    ``save(update_fields=...)`` costs it too: the columns it does not write are as the
    database holds them, which the instance in memory may not). A callable is called with the
    instance as saved (or about to be deleted), never with the old row.

    Call it from an ``AppConfig.ready()`` method (the m2m relations are known once the models
    are loaded). Registering again for the same model, cache and mode replaces the tags
    (``ready()`` may run twice, as under ``override_settings(INSTALLED_APPS=...)``); the
    receivers are connected once (``dispatch_uid``). Receivers are connected for ``model``
    itself: register a proxy or a multi-table child on its own, as Django sends its signals
    under its own class.

    Raises:
        TypeError, ValueError: ``model`` is not a concrete model class, or a tag is neither a
            format string of its columns nor a callable.
        ImproperlyConfigured: ``cache`` is not in ``CACHES``, or the models are not loaded.
    """
    label = _checked_model(model)
    if not tags:
        raise ValueError(f"invalidate_on_change({label}) needs a tag, e.g. 'product:{{pk}}'")
    if cache not in settings.CACHES:
        raise ImproperlyConfigured(
            f"invalidate_on_change({label}, cache={cache!r}): no such alias in CACHES "
            f"({', '.join(settings.CACHES)}); name the alias of a StampedeCache"
        )
    if not isinstance(soft, bool):
        raise TypeError(f"invalidate_on_change({label}, soft=...) must be a bool; got {soft!r}")
    formats = tuple(spec for spec in tags if isinstance(spec, str))
    callables = tuple(spec for spec in tags if not isinstance(spec, str))
    for spec in callables:
        if not callable(spec):
            raise TypeError(
                f"invalidate_on_change({label}): a tag is a format string such as "
                f"'product:{{pk}}' or a callable instance -> tags; got {spec!r}"
            )
    columns = {name: _column(model, name, spec) for spec in formats for name in _names(spec)}
    _registry.setdefault(model, {})[(cache, soft)] = _Registration(
        formats, callables, tuple(columns.items()), cache, soft
    )
    _connect(model)


def _checked_model(model: Any) -> str:
    """Return the label of ``model``, or raise if it is not a concrete, loaded model class."""
    if not _is_model_class(model):
        raise TypeError(
            f"invalidate_on_change(model=...) takes a model class such as Product; got {model!r}"
        )
    label = str(model._meta.label)
    if model._meta.abstract:
        raise TypeError(
            f"invalidate_on_change({label}): an abstract model sends no signals; "
            "register each concrete subclass"
        )
    try:
        apps.check_models_ready()
    except AppRegistryNotReady as exc:
        raise ImproperlyConfigured(
            f"invalidate_on_change({label}) connects signals once the models are loaded: "
            "call it from an AppConfig.ready() method"
        ) from exc
    return label


def _is_model_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, models.Model)


def _names(spec: str) -> list[str]:
    """Return the names the format string ``spec`` uses, checking its constant part."""
    names = [name for _, name, _, _ in _FORMATTER.parse(spec) if name is not None]
    if not names:
        checked_tags([spec])  # a constant tag ("catalog") is checked as it is
    return names


def _column(model: type[models.Model], name: str, spec: str) -> str:
    """Return the attribute the name ``name`` of the format string ``spec`` reads."""
    if name == "pk":
        return str(model._meta.pk.attname)
    fix = "name pk or a column (a foreign key by its <name>_id), or pass a callable"
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        field = None
    if field is None or not field.concrete or field.many_to_many:
        raise ValueError(f"invalidate_on_change({model._meta.label}): {spec!r}: {fix}")
    if name != field.attname:
        raise ValueError(
            f"invalidate_on_change({model._meta.label}): {spec!r} names the relation "
            f"{name!r}; name its column {{{field.attname}}}"
        )
    return str(field.attname)


def _connect(model: type[models.Model]) -> None:
    uid = f"stampede.invalidation:{model._meta.label}"
    pre_save.connect(_before_save, sender=model, dispatch_uid=uid)
    post_save.connect(_saved, sender=model, dispatch_uid=uid)
    pre_delete.connect(_deleting, sender=model, dispatch_uid=uid)
    fields = [f for f in model._meta.many_to_many]
    fields += [rel.field for rel in model._meta.related_objects if rel.many_to_many]
    for field in fields:
        through = field.remote_field.through
        _m2m_fields[through] = field
        uid = f"stampede.invalidation:{through._meta.label}"
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=uid)


def _schedule(
    instance: Any,
    using: str | None,
    before: dict[str, Any] | None = None,
    kept: dict[str, Any] | None = None,
) -> None:
    """Invalidate, on commit, the tags of ``instance``, with the columns ``kept`` (those a
    save did not write) as the database holds them, and those of ``before``, its old row."""
    for registration in _registry.get(type(instance), {}).values():
        tags = registration.tags(instance, kept)
        if before is not None:
            tags += registration.tags(instance, before, callables=False)
        invalidate_tags_on_commit(
            *tags, cache=registration.cache, soft=registration.soft, using=using
        )


# -- receivers -------------------------------------------------------------------------------


def _before_save(sender: Any, instance: Any, using: str | None = None, **kwargs: Any) -> None:
    """Read the old values of the columns the tags name, for :func:`_saved`: one query."""
    instance.__dict__.pop(_BEFORE, None)
    if instance.pk is None or instance._state.adding:
        return  # a new row has no old tags
    pk = sender._meta.pk.attname
    read = {
        attname
        for registration in _registry.get(sender, {}).values()
        for _, attname in registration.columns
        if attname != pk
    }
    if not read:
        return
    row = sender._base_manager.using(using).filter(pk=instance.pk).values(*read).first()
    if row is not None:
        instance.__dict__[_BEFORE] = row


def _saved(sender: Any, instance: Any, using: str | None = None, **kwargs: Any) -> None:
    """Invalidate the tags of the row as it was and as it is: with ``update_fields``, the
    columns the save did not write are as the database holds them, whatever the instance
    holds in memory."""
    before = instance.__dict__.pop(_BEFORE, None)
    update_fields = kwargs.get("update_fields")
    kept = None
    if before is not None and update_fields is not None:
        written = {sender._meta.get_field(name).attname for name in update_fields}
        kept = {attname: value for attname, value in before.items() if attname not in written}
    _schedule(instance, using, before, kept)


def _deleting(sender: Any, instance: Any, using: str | None = None, **kwargs: Any) -> None:
    """Invalidate the row and the rows linked to it by m2m (the delete drops the links and
    sends no ``m2m_changed``): at ``pre_delete``, where a callable still sees the links. The
    collector sends it inside its atomic block, so the hooks run after the delete commits."""
    _schedule(instance, using)
    for through, field in list(_m2m_fields.items()):
        for reverse, own, other in (
            (False, field.model, field.related_model),
            (True, field.related_model, field.model),
        ):
            if own is sender and other in _registry:
                for row in _linked(through, field, instance, reverse, other, using):
                    _schedule(row, using)


def _m2m_changed(
    sender: Any,
    instance: Any,
    action: str,
    reverse: bool,
    model: type[models.Model],
    pk_set: set[Any] | None,
    using: str | None = None,
    **kwargs: Any,
) -> None:
    """Invalidate both sides of a changed link: ``instance``, and the rows of ``model`` it
    gained or lost (read by pk, or, for a clear, by the links it is about to lose).

    The managers send these inside their own atomic block, so a hook registered at ``pre_``
    still runs after the links are written. ``instance`` is seen at ``pre_`` and ``post_``,
    for a callable that reads its links.
    """
    if type(instance) in _registry:
        _schedule(instance, using)
    if model not in _registry:
        return
    if action in ("post_add", "post_remove") and pk_set:
        rows = _by_pk(model._base_manager.using(using), list(pk_set))
    elif action == "pre_clear":
        rows = _linked(sender, _m2m_fields[sender], instance, reverse, model, using)
    else:
        return
    for row in rows:
        _schedule(row, using)


def _linked(
    through: Any, field: Any, instance: Any, reverse: bool, model: Any, using: str | None
) -> Iterator[Any]:
    """Yield the rows of ``model`` linked to ``instance`` through ``field`` (``reverse``:
    ``instance`` is on the side of the model the field points to)."""
    own, other = field.m2m_field_name(), field.m2m_reverse_field_name()
    if reverse:
        own, other = other, own
    links = through._base_manager.using(using).filter(**{own: instance.pk}).values(other)
    return model._base_manager.using(using).filter(pk__in=links).iterator()


# -- the operations that send no signal -----------------------------------------------------


def update(queryset: models.QuerySet, **values: Any) -> int:
    """Return what ``queryset.update(**values)`` returns, having run it and invalidated, on
    commit, the tags of every row it updated, as they were before and after.

    ``QuerySet.update`` sends no signal. This reads the rows first (``select_for_update``:
    on a database that locks, they cannot change before the update), updates, and reads
    them again by pk when a column a tag names is updated or a callable tag may see the
    change, all in one atomic block: one more query, and one per 500 rows read again. A row
    that starts matching the queryset between the read and the update (a concurrent insert)
    is updated but not invalidated. ``queryset`` yields model instances (not ``values()``);
    a model that is not registered is just updated.
    """
    model = queryset.model
    registrations = list(_registry.get(model, {}).values())
    if not registrations:
        return int(queryset.update(**values))
    locked = queryset.select_related(None).select_for_update()
    with transaction.atomic(using=locked.db):
        before = list(locked)
        count = int(queryset.update(**values))
        after: list[Any] = []
        if _may_move(model, registrations, values):
            manager = model._base_manager.using(locked.db)
            after = list(_by_pk(manager, [obj.pk for obj in before]))
        for obj in [*before, *after]:
            _schedule(obj, locked.db)
    return count


async def aupdate(queryset: models.QuerySet, **values: Any) -> int:
    """Async twin of :func:`update` (Django's ``aupdate`` runs in a thread as well)."""
    return await sync_to_async(update)(queryset, **values)


def bulk_update(
    queryset: Any, objs: Iterable[Any], fields: Sequence[str], batch_size: int | None = None
) -> int:
    """Return what ``bulk_update(objs, fields)`` of ``queryset`` (a model, manager or
    queryset) returns, having invalidated, on commit, the tags of ``objs`` as they were in
    the database (read first by pk, only when a tag may change with ``fields``) and as
    written.
    """
    if _is_model_class(queryset):
        queryset = queryset._default_manager.all()
    objs = list(objs)
    model = queryset.model
    registrations = list(_registry.get(model, {}).values())
    if not registrations:
        return int(queryset.bulk_update(objs, fields, batch_size=batch_size))
    locked = queryset.select_related(None).select_for_update()
    with transaction.atomic(using=locked.db):
        before: list[Any] = []
        if _may_move(model, registrations, fields):
            before = list(_by_pk(locked, [obj.pk for obj in objs]))
        count = int(queryset.bulk_update(objs, fields, batch_size=batch_size))
        for obj in [*before, *objs]:
            _schedule(obj, locked.db)
    return count


def _may_move(
    model: type[models.Model], registrations: list[_Registration], fields: Iterable[str]
) -> bool:
    """Return whether writing ``fields`` may change a tag of a row of ``model``."""
    if any(registration.callables for registration in registrations):
        return True
    written = {model._meta.get_field(name).attname for name in fields}
    return any(
        attname in written for registration in registrations for _, attname in registration.columns
    )


def _by_pk(queryset: Any, pks: Sequence[Any]) -> Iterator[Any]:
    """Yield the rows of ``queryset`` whose pk is in ``pks``, a few hundred per query."""
    for start in range(0, len(pks), _CHUNK):
        yield from queryset.filter(pk__in=pks[start : start + _CHUNK])
