"""The hooks runtime: lifecycle dispatch to hook components and the arms it commits."""
