module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x20xf32> loc("x"), %arg1: tensor<20x3xf32> loc("w")) -> (tensor<4x3xf32> {jax.result_info = "dot"}, tensor<4x20xf32> {jax.result_info = "tanh"}, tensor<3xf32> {jax.result_info = "max"}) {
    %0 = stablehlo.convert %arg0 : (tensor<4x20xf32>) -> tensor<4x20xbf16>
    %1 = stablehlo.convert %arg1 : (tensor<20x3xf32>) -> tensor<20x3xbf16>
    %2 = stablehlo.constant dense<5.000000e-01> : tensor<4x20xbf16>
    %3 = stablehlo.constant dense<"0x33BF1ABF00BFCDBE9ABE4DBECDBD0000CD3D4D3E9A3ECD3E003F1A3F333F4D3F663F803F8D3F9A3F"> : tensor<20xbf16>
    %4 = stablehlo.broadcast_in_dim %3, dims = [1] : (tensor<20xbf16>) -> tensor<4x20xbf16>
    %5 = stablehlo.constant dense<[1.000000e+00, -2.500000e+00, 3.000000e+00]> : tensor<3xbf16>
    %6 = stablehlo.add %0, %4 : tensor<4x20xbf16>
    %7 = stablehlo.multiply %6, %2 : tensor<4x20xbf16>
    %8 = stablehlo.tanh %7 : tensor<4x20xbf16>
    %9 = stablehlo.compare GT, %8, %2, FLOAT : (tensor<4x20xbf16>, tensor<4x20xbf16>) -> tensor<4x20xi1>
    %10 = stablehlo.select %9, %2, %8 : tensor<4x20xi1>, tensor<4x20xbf16>
    %11 = stablehlo.dot_general %10, %1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x20xbf16>, tensor<20x3xbf16>) -> tensor<4x3xf32>
    %init12 = stablehlo.constant dense<0xFF80> : tensor<bf16>
    %12 = stablehlo.reduce(%1 init: %init12) applies stablehlo.maximum across dimensions = [0] : (tensor<20x3xbf16>, tensor<bf16>) -> tensor<3xbf16>
    %13 = stablehlo.multiply %12, %5 : tensor<3xbf16>
    %14 = stablehlo.convert %10 : (tensor<4x20xbf16>) -> tensor<4x20xf32>
    %15 = stablehlo.convert %13 : (tensor<3xbf16>) -> tensor<3xf32>
    return %11, %14, %15 : tensor<4x3xf32>, tensor<4x20xf32>, tensor<3xf32>
  }
}
