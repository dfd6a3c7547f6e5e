"""What readers see: Plotly figures in one shared style, tables, and the live panels."""
