"""The compatibility census: TileLang's own example scripts run against tilecraft with only
their imports redirected, every kernel compiled for sm_90a without a GPU, and each failure
put in a class (tools/compat_census.py is the command)."""
