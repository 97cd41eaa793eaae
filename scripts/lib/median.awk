# Shared by scripts/cpu-time and scripts/gateway-cpu (put before their awk programs' text):
# median(a, n) sorts a[1..n] in place and returns its median.
function median(a, n,   i, j, x) {
  for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
