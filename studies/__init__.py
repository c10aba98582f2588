"""Studies and measurements behind the choices in results/: not part of the product packages."""
