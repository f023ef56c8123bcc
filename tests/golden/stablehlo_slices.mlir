module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3x8xf32> loc("x"), %arg1: tensor<2x5xi32> loc("k"), %arg2: tensor<3x8xf32> loc("cos"), %arg3: tensor<3x8xf32> loc("sin")) -> (tensor<f32> {jax.result_info = "loss"}, tensor<2x5x6xf32> {jax.result_info = "padded"}, tensor<2x3x16xf32> {jax.result_info = "three"}, tensor<2x13xi32> {jax.result_info = "ints"}, tensor<2x3x8xf32> {jax.result_info = "grad.x"}) {
    %0 = stablehlo.slice %arg0 [0:2, 0:3, 0:4] : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
    %1 = stablehlo.slice %arg0 [0:2, 0:3, 4:8] : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
    %2 = stablehlo.negate %1 : tensor<2x3x4xf32>
    %3 = stablehlo.concatenate %2, %0, dim = 2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
    %4 = stablehlo.broadcast_in_dim %arg3, dims = [1, 2] : (tensor<3x8xf32>) -> tensor<2x3x8xf32>
    %5 = stablehlo.multiply %3, %4 : tensor<2x3x8xf32>
    %6 = stablehlo.broadcast_in_dim %arg2, dims = [1, 2] : (tensor<3x8xf32>) -> tensor<2x3x8xf32>
    %7 = stablehlo.multiply %arg0, %6 : tensor<2x3x8xf32>
    %8 = stablehlo.add %7, %5 : tensor<2x3x8xf32>
    %9 = stablehlo.slice %arg0 [1:2, 0:3:2, 1:8:3] : (tensor<2x3x8xf32>) -> tensor<1x2x3xf32>
    %pad10 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %10 = stablehlo.pad %9, %pad10, low = [1, 0, 2], high = [0, 3, 1], interior = [0, 0, 0] : (tensor<1x2x3xf32>, tensor<f32>) -> tensor<2x5x6xf32>
    %11 = stablehlo.multiply %10, %10 : tensor<2x5x6xf32>
    %init12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %12 = stablehlo.reduce(%11 init: %init12) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<2x5x6xf32>, tensor<f32>) -> tensor<f32>
    %13 = stablehlo.multiply %8, %8 : tensor<2x3x8xf32>
    %init14 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %14 = stablehlo.reduce(%13 init: %init14) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<f32>
    %15 = stablehlo.add %14, %12 : tensor<f32>
    %16 = stablehlo.constant dense<2.000000e+00> : tensor<2x3x4xf32>
    %17 = stablehlo.multiply %1, %16 : tensor<2x3x4xf32>
    %18 = stablehlo.concatenate %arg0, %0, %17, dim = 2 : (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x16xf32>
    %19 = stablehlo.slice %arg1 [0:2, 1:3] : (tensor<2x5xi32>) -> tensor<2x2xi32>
    %pad20 = stablehlo.constant dense<0> : tensor<i32>
    %20 = stablehlo.pad %arg1, %pad20, low = [0, 0], high = [0, 1], interior = [0, 0] : (tensor<2x5xi32>, tensor<i32>) -> tensor<2x6xi32>
    %21 = stablehlo.concatenate %arg1, %19, %20, dim = 1 : (tensor<2x5xi32>, tensor<2x2xi32>, tensor<2x6xi32>) -> tensor<2x13xi32>
    %22 = stablehlo.add %8, %8 : tensor<2x3x8xf32>
    %23 = stablehlo.add %10, %10 : tensor<2x5x6xf32>
    %24 = stablehlo.slice %23 [1:2, 0:2, 2:5] : (tensor<2x5x6xf32>) -> tensor<1x2x3xf32>
    %25 = stablehlo.reshape %24 : (tensor<1x2x3xf32>) -> tensor<1x2x1x3xf32>
    %pad26 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %26 = stablehlo.pad %25, %pad26, low = [0, 0, 0, 0], high = [0, 0, 1, 0], interior = [0, 0, 0, 0] : (tensor<1x2x1x3xf32>, tensor<f32>) -> tensor<1x2x2x3xf32>
    %27 = stablehlo.reshape %26 : (tensor<1x2x2x3xf32>) -> tensor<1x4x3xf32>
    %28 = stablehlo.slice %27 [0:1, 0:3, 0:3] : (tensor<1x4x3xf32>) -> tensor<1x3x3xf32>
    %29 = stablehlo.reshape %28 : (tensor<1x3x3xf32>) -> tensor<1x3x3x1xf32>
    %pad30 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %30 = stablehlo.pad %29, %pad30, low = [0, 0, 0, 0], high = [0, 0, 0, 2], interior = [0, 0, 0, 0] : (tensor<1x3x3x1xf32>, tensor<f32>) -> tensor<1x3x3x3xf32>
    %31 = stablehlo.reshape %30 : (tensor<1x3x3x3xf32>) -> tensor<1x3x9xf32>
    %32 = stablehlo.slice %31 [0:1, 0:3, 0:7] : (tensor<1x3x9xf32>) -> tensor<1x3x7xf32>
    %pad33 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %33 = stablehlo.pad %32, %pad33, low = [1, 0, 1], high = [0, 0, 0], interior = [0, 0, 0] : (tensor<1x3x7xf32>, tensor<f32>) -> tensor<2x3x8xf32>
    %34 = stablehlo.multiply %22, %6 : tensor<2x3x8xf32>
    %35 = stablehlo.add %33, %34 : tensor<2x3x8xf32>
    %36 = stablehlo.multiply %22, %4 : tensor<2x3x8xf32>
    %37 = stablehlo.slice %36 [0:2, 0:3, 0:4] : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
    %38 = stablehlo.slice %36 [0:2, 0:3, 4:8] : (tensor<2x3x8xf32>) -> tensor<2x3x4xf32>
    %39 = stablehlo.negate %37 : tensor<2x3x4xf32>
    %pad40 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %40 = stablehlo.pad %39, %pad40, low = [0, 0, 4], high = [0, 0, 0], interior = [0, 0, 0] : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x8xf32>
    %41 = stablehlo.add %35, %40 : tensor<2x3x8xf32>
    %pad42 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %42 = stablehlo.pad %38, %pad42, low = [0, 0, 0], high = [0, 0, 4], interior = [0, 0, 0] : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x8xf32>
    %43 = stablehlo.add %41, %42 : tensor<2x3x8xf32>
    return %15, %10, %18, %21, %43 : tensor<f32>, tensor<2x5x6xf32>, tensor<2x3x16xf32>, tensor<2x13xi32>, tensor<2x3x8xf32>
  }
}
