"""Demand forecasting for a furniture retailer in a persistent sandboxed workspace."""

REGISTRATIONS = [
    {"id": "clbench/SalesForecast-v6", "entry_point": "clbench.envs.salesforecast.salesforecast_env:SalesForecastEnv"},
]
