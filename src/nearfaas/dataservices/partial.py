"""Partial push-back: a query cut in two, the filter on the storage node and the rest on the host.

The thesis's third placement (Ch. 4.5): the node runs the part of the plan that shrinks the data
(the WHERE, and the choice of columns), and ships that intermediate with the remaining sub-plan
piggybacked; the host finishes it. It wins when the filter is selective but what follows is
expensive (``power`` over every kept row, a GROUP BY) and the node is weak or busy: the node
does the cheap pass over every row, the host the costly pass over few.

``split(tree, columns) -> Split | None``:

    node:  SELECT <the base columns the rest needs> FROM t WHERE <the WHERE, aliases inlined>
           [LIMIT n, when nothing after the filter changes the row count]
    host:  the query without its WHERE, over the intermediate (named as the table was)

Worked example (Table 5.3's columns):
``select particle_id, power(vx, 2) + power(vy, 2) from particles where x >= 0.9`` →
node ``SELECT particle_id, vx, vy FROM particles WHERE x >= 0.9`` (3 of 9 columns, 10% of rows),
host ``SELECT particle_id, POWER(vx, 2) + POWER(vy, 2) FROM particles``.

Why there is no split (None): a UNION or a subquery in FROM (the cut would have to go inside),
or ``SELECT *`` without aggregation (the node part would be the whole query: that is offload).

Known caveats:
* The host part re-evaluates nothing the node computed: an expression used in both the WHERE
  and the SELECT list is computed once on each side (as ``sql.execute`` does within one side).
* Aggregates are not split into partial aggregates (a sum of per-object sums): the node part
  keeps rows, so for a GROUP BY its intermediate is the filtered rows, not the groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from nearfaas.dataservices.sql import AGGREGATES, aliases


@dataclass(frozen=True)
class Split:
    node: exp.Select  # runs where the object is
    host: exp.Select  # runs over the node part's result, under the same table name
    columns: list[str]  # the node part's output columns


def split(tree: exp.Expression, columns: list[str]) -> Split | None:
    """The two halves of ``tree`` over a table with ``columns``; None when it has no useful cut."""
    if not isinstance(tree, exp.Select):
        return None
    src = tree.args.get("from_") or tree.args.get("from")
    if src is None or not isinstance(src.this, exp.Table):
        return None
    names = aliases(tree)
    aggregated = tree.args.get("group") is not None or any(e.find(*AGGREGATES) for e in tree.expressions)
    if any(isinstance(e, exp.Star) for e in tree.expressions):
        if not aggregated:
            return None
        needed = list(columns)
    else:
        used: set[str] = set()
        for e in tree.expressions:
            _base_columns(e, columns, names, used, set())
        group = tree.args.get("group")
        for k in group.expressions if group is not None else []:
            _base_columns(k, columns, names, used, set())
        # count(*) and constants need no column, but the node must still ship one row per row
        needed = [c for c in columns if c in used] or columns[:1]
    node = exp.select(*[exp.column(c) for c in needed]).from_(src.this.copy())
    where = tree.args.get("where")
    if where is not None:
        node.set("where", exp.Where(this=_inline(where.this.copy(), columns, names)))
    if tree.args.get("limit") is not None and not aggregated:
        node.set("limit", tree.args["limit"].copy())  # filter, then keep n rows: the host keeps the same n
    host = tree.copy()
    host.set("where", None)
    return Split(node=node, host=host, columns=needed)


def _base_columns(node: exp.Expression, columns: list[str], names: dict, out: set, seen: set) -> None:
    """The table's columns ``node`` reads, through the SELECT's aliases (``seen`` stops a cycle)."""
    for col in node.find_all(exp.Column):
        if col.name in columns:
            out.add(col.name)
        elif col.name in names and col.name not in seen:
            _base_columns(names[col.name], columns, names, out, seen | {col.name})


def _inline(node: exp.Expression, columns: list[str], names: dict, depth: int = 0) -> exp.Expression:
    """``node`` with every alias it names replaced by the aliased expression: the node part has
    no SELECT list to resolve them against. A table column shadows an alias, as in ``sql.evaluate``."""
    if depth > 32:
        return node
    for col in list(node.find_all(exp.Column)):
        if col.name not in columns and col.name in names:
            inner = _inline(exp.Paren(this=names[col.name].copy()), columns, names, depth + 1)
            if col is node:
                return inner
            col.replace(inner)
    return node
