"""The figures' maths: percentiles and round figures, intervals of means and shares, effects, history, the publication rules."""
