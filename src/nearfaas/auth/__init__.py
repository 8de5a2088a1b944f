"""Trust between the parts of a cluster.

- :mod:`internal` — the per-cluster secret that signs every gateway -> node call, so a node's
  internal API and its S3 port answer the gateway alone.
- :mod:`function_keys` — the scoped S3 credentials each function's workers get instead of the
  cluster's keys, derived from the cluster secret so that any part can check them without a table.
- :mod:`admin` — who may use the gateway's ``/system`` API, and the checks that keep a web page
  from using it through a browser (CSRF).
- :mod:`keys` — more S3 access keys, from a keys file that is reloaded when it changes, each
  limited by a policy; :mod:`policy` — the S3 bucket-policy subset that limits them.
"""
