"""One module per tab, or a package of one module per part for the larger tabs (train, attention),
each with `build(ctx: playground.context.AppContext) -> None`.

Never imports a tab here: `playground.app` imports each one it lays out.
"""
