"""Bridges from this project's method to engines that train real models: verl/ (verl 0.9.1).

Optional, and off the reading path: the core and the lab never import them, and they import the
core and the data layer, never the lab.
"""
