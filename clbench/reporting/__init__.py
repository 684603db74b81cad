"""Reports of run directories: tables (markdown, HTML, JSON), plots, leaderboards.

    from clbench.reporting import figures, html, model, tables
    report = model.build("runs/x")                     # metrics under the selected conventions
    figs = figures.render(report)                      # PNGs in memory
    figures.write(figs, "runs/x/plots")                # next to the results
    page = html.render(report, figs)                   # one self-contained file
    print(tables.markdown(report))

Submodules import matplotlib and the metrics lazily through this package, so importing it is cheap.
"""

#: Conventions a report can use: see clbench.reporting.model.
CHOICES = ("auto", "clbench", "upstream", "both")
#: Suite aggregates a leaderboard can be sorted by.
SORT_KEYS = ("normalized_reward", "normalized_gain")
