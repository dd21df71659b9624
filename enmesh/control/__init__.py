"""The control plane: `enmesh apply` changes a running stack live (DESIGN.md, "The control plane").

`plan` diffs the desired state (the compiled model) against what the stack runs, `brokers`,
`users` and `routers` apply each part of the difference, `output` prints a plan, `target`
says how to reach a stack's routers and brokers, `apply` runs the whole thing.
"""
