"""The datacenter twin: the applications' end-to-end cost on each platform (e2e.py, energy,
cost) and a rack-scale discrete-event simulation driven by the live placement policies (sim/).
Every number it produces is modelled, with the measured inputs it starts from named."""
