"""Arrow data services next to the data (issue 17; the thesis's Ch. 4.5 and 5.4).

* ``particles``: the thesis's particle tables (Table 5.3's schema), generated in code.
* ``sketches``: per-column statistics of a table, KLL quantile sketches and Theta distinct-count
  sketches (Apache DataSketches), mergeable as objects arrive.
* ``sql``: SQL (parsed by sqlglot) run with Arrow compute / Acero over Arrow tables.
* ``cardinality``: the estimator: a query's output rows from the sketches alone, with the
  thesis's rewrite rules, independence between columns, and distinct counts for group-by.
* ``table54``: Table 5.4's queries Q1–Q8, estimate vs actual and the estimator's cost.
* ``objects``, ``select_request``, ``select``: tabular objects and S3 Select over one of them.
* ``operations``: a query's operations vector (elements per Arrow kernel), from the sketches.
* ``templates``: Table 5.5's query templates T1–T10 with random constants.
* ``costmodels``: random-forest models of query time, result size, serialization and transfer
  time, trained and evaluated on this machine (Table 5.6's shape).
"""
