"""Units that compose: a dependency's passed code, present wherever a unit's code runs.

    names     how a unit is imported: python `units.<name>`, node `@units/<id>`
    layout    the tree of those packages built from units' code (pure)
    imports   what a unit's code imports of other units, checked before it runs (pure)
    mount     the tree of one session's dependencies on the host, bound into its runs

A session's view still holds only upstream contract.json files (nothing to Read); the
tree is bound read-only into test runs only, at `/upstream`.
"""
