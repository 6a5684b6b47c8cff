"""One module per tab, each with `build(ctx: playground.context.AppContext) -> None`."""
